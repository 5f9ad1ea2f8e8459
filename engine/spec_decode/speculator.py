"""The engine's side of speculation: before each schedule, drafts for the decoding sequences (proposer, then the
policy's k per sequence); after each verify, acceptance records, step costs and vLLM's counters."""

import time
from dataclasses import dataclass, field

from floodway.engine.kv_manager import KVManager
from floodway.engine.request import Request
from floodway.engine.spec_decode import ngram, policy
from floodway.engine.spec_decode.config import SpeculativeConfig
from floodway.engine.spec_decode.draft import DraftModel
from floodway.engine.spec_decode.step_cost import StepCost
from floodway.engine.structured_grammar import valid_prefix


@dataclass
class SpecCounters:
    """vLLM's spec_decode counters: verifies with at least one draft, drafts, accepted drafts, and accepted
    drafts by position (index j: the (j+1)-th draft of a verify)."""
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


class Speculator:
    def __init__(self, cfg: SpeculativeConfig, kv: KVManager, draft: DraftModel | None = None,
                 cpu_time: bool = False, row_tile: int = 1):
        self.cfg, self.kv, self.draft = cfg, kv, draft
        # Steps are priced in what bounds throughput: on CPU the process's CPU seconds, which neighbours on a shared
        # machine do not inflate as they do wall time (a fit's residual measured 8% against 27%); on a GPU, wall.
        self._clock = time.process_time if cpu_time else time.perf_counter
        self._started: float | None = None
        self.counters = SpecCounters(accepted_per_pos=[0] * cfg.num_speculative_tokens)
        self.cost = StepCost(row_tile)
        self.overall = policy.Acceptance()  # all sequences': the prior of a sequence without a record
        self.calibration = policy.Calibration()
        self._since_probe = 0  # decode steps since the last probe
        self._probe_every = policy.PROBE_EVERY
        self._drafting = True  # whether the last step the policy chose verified any draft

    def propose(self, reqs: list[Request]) -> None:
        """Sets each decoding sequence's spec_token_ids for the coming step, whose time runs from here (a draft
        model's forwards are part of it)."""
        self._started = self._clock()
        self._since_probe += 1
        # A probe step does what the policy has not chosen lately, so that the step cost's fit keeps timing both.
        probe = self._since_probe >= self._probe_every
        if probe:
            self._since_probe = 0
            if not self._drafting:  # off since the last probe: the next one comes twice as late
                self._probe_every = min(2 * self._probe_every, policy.MAX_PROBE_EVERY)
        if probe and self._drafting:
            for r in reqs:
                r.spec_token_ids = []
            return
        caps = [self._cap(r) for r in reqs]
        c = self.cfg
        if self.draft is None:  # prompt lookup costs nearly nothing: propose, then choose among the proposals
            available = [ngram.propose(r.all_token_ids, k, c.prompt_lookup_min, c.prompt_lookup_max)
                         for r, k in zip(reqs, caps, strict=True)]
            caps = [len(a) for a in available]
        prior = self.overall.rate()
        rates = [r.spec_acceptance.rate(prior) for r in reqs]
        ks = policy.choose_num_drafts(rates, caps, self.cost.decode_s(len(reqs)), self.cost.verify_s(),
                                      self.calibration.ratio, self.cost.row_tile)
        if probe:
            ks = caps
        else:
            self._drafting = any(ks)
            if self._drafting:
                self._probe_every = policy.PROBE_EVERY
        if self.draft is not None:  # the draft model's steps cost: only the drafts chosen are generated
            available = self.draft.propose(reqs, ks, self.kv)
        for r, drafts, k, rate in zip(reqs, available, ks, rates, strict=True):
            drafts = drafts[:k]
            if drafts and r.grammar is not None:
                drafts = drafts[:valid_prefix(r.grammar, drafts)]
            r.spec_token_ids = drafts
            r.spec_expected = policy.expected_accepted(rate, len(drafts))

    def _cap(self, req: Request) -> int:
        """The most drafts a sequence may verify now."""
        p = req.params
        # A seeded sampled sequence must not depend on what runs beside it, and its draws would (k varies).
        if p.seed is not None and not p.greedy:
            return 0
        return max(0, min(self.cfg.num_speculative_tokens, p.max_tokens - len(req.output_token_ids) - 1))

    def record(self, req: Request, num_drafts: int, num_accepted: int) -> None:
        """One sequence's verify: num_accepted of its num_drafts drafts were kept."""
        if not num_drafts:
            return
        if self.draft is not None:
            self.draft.settle(req)
        req.spec_acceptance.update(num_drafts, num_accepted)
        self.overall.update(num_drafts, num_accepted)
        self.calibration.update(req.spec_expected, num_accepted)
        c = self.counters
        c.num_drafts += 1
        c.num_draft_tokens += num_drafts
        c.num_accepted_tokens += num_accepted
        for j in range(num_accepted):
            c.accepted_per_pos[j] += 1

    def observe_step(self, num_decodes: int, num_drafts: int, num_prefill_tokens: int) -> None:
        """The end of a step proposed for, timed for the policy's costs: only steps without prefill (they measure
        decode and verify)."""
        if self._started is not None and num_decodes and not num_prefill_tokens:
            self.cost.observe(num_decodes, num_drafts, self._clock() - self._started)
        self._started = None
