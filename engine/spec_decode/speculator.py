"""The engine's side of speculation: before each schedule, drafts for the decoding sequences (proposer, then the
policy's k per sequence); after each verify, acceptance records, step times and vLLM's counters."""

import time
from dataclasses import dataclass, field

from floodway.engine.kv_manager import KVManager
from floodway.engine.prefill_budget import StepTimes
from floodway.engine.request import Request
from floodway.engine.spec_decode import ngram, policy
from floodway.engine.spec_decode.config import SpeculativeConfig
from floodway.engine.spec_decode.draft import DraftModel
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
    def __init__(self, cfg: SpeculativeConfig, kv: KVManager, draft: DraftModel | None = None):
        self.cfg, self.kv, self.draft = cfg, kv, draft
        self.counters = SpecCounters(accepted_per_pos=[0] * cfg.num_speculative_tokens)
        self.times = StepTimes()  # decode_s: plain decode steps; per "prefill" token: per verified draft
        self.overall = policy.Acceptance()  # all sequences': the prior of a sequence without a record
        self._decode_steps = 0
        self._propose_s = 0.0  # the last proposal's time: part of the step it feeds (a draft model's forwards)

    def propose(self, reqs: list[Request]) -> None:
        """Sets each decoding sequence's spec_token_ids for the coming step."""
        self._decode_steps += 1
        if self._decode_steps % policy.PROBE_EVERY == 0:
            for r in reqs:
                r.spec_token_ids = []
            self._propose_s = 0.0
            return
        started = time.perf_counter()
        caps = [self._cap(r) for r in reqs]
        c = self.cfg
        if self.draft is None:  # prompt lookup costs nearly nothing: propose, then choose among the proposals
            available = [ngram.propose(r.all_token_ids, k, c.prompt_lookup_min, c.prompt_lookup_max)
                         for r, k in zip(reqs, caps, strict=True)]
            caps = [len(a) for a in available]
        prior = self.overall.rate()
        ks = policy.choose_num_drafts([r.spec_acceptance.rate(prior) for r in reqs], caps, self.times.decode_s,
                                      self.times.s_per_prefill_token)
        if self.draft is not None:  # the draft model's steps cost: only the drafts chosen are generated
            available = self.draft.propose(reqs, ks, self.kv)
        for r, drafts, k in zip(reqs, available, ks, strict=True):
            drafts = drafts[:k]
            if drafts and r.grammar is not None:
                drafts = drafts[:valid_prefix(r.grammar, drafts)]
            r.spec_token_ids = drafts
        self._propose_s = time.perf_counter() - started

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
        c = self.counters
        c.num_drafts += 1
        c.num_draft_tokens += num_drafts
        c.num_accepted_tokens += num_accepted
        for j in range(num_accepted):
            c.accepted_per_pos[j] += 1

    def observe_step(self, num_decodes: int, num_drafts: int, num_prefill_tokens: int, seconds: float) -> None:
        """A step's time, for the policy's costs: only steps without prefill (they measure decode and verify)."""
        if num_decodes and not num_prefill_tokens:
            self.times.observe(num_decodes, num_drafts, seconds + self._propose_s)
        self._propose_s = 0.0
