"""Iteration-level scheduling: one token budget per step, running requests first (decodes and prefill chunks),
then waiting ones; preemption by recompute, newest first, when KV blocks run out. A step that decodes may
carry at most `prefill_budget` prefill tokens (TPOT protection, engine/prefill_budget.py).

Under the priority policy (engine/scheduling_policy.py) both queues are kept in rank order, so the same rules
serve the highest-ranked first and preempt the lowest-ranked first; a prompt being prefilled yields the step's
budget to waiting requests ranked above it (its chunk comes after their admission, from what is left), so a long
low-priority prompt delays a high-priority one's first token by at most the step already running; and a waiting
request with no seat (max_num_seqs) or no blocks for its first chunk preempts running requests of a lower
priority for them, lowest-ranked first, as vLLM's priority policy does: a batch full of long batch answers would
otherwise hold an interactive request until one finished. Decodes never yield: running requests go first.

A request with n > 1 sequences queues as one (its first sequence, carrying the others as `forks`) and takes
seats for all of them at admission; once its prompt is prefilled the others fork off it, sharing its blocks.
From then on each sequence is scheduled, preempted and recomputed on its own."""

import bisect
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from floodway.engine.kv_manager import KVManager
from floodway.engine.lora.residency import admits
from floodway.engine.request import Request, Status
from floodway.engine.scheduling_policy import FCFS, PRIORITY, rank

if TYPE_CHECKING:
    from floodway.engine.spec_decode.speculator import Speculator


@dataclass
class ScheduledSeq:
    req: Request
    num_new_tokens: int  # including num_spec draft tokens, verified after the request's last token
    num_spec: int = 0

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the request's tokens, so its last logits give the next token."""
        return self.req.num_computed_tokens + self.num_new_tokens - self.num_spec == self.req.num_tokens


@dataclass
class SchedulerOutput:
    seqs: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.seqs)


@dataclass
class SchedulerCounters:
    num_preemptions: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0


class Scheduler:
    def __init__(self, kv: KVManager, max_num_seqs: int, max_num_batched_tokens: int, chunked_prefill: bool,
                 speculator: "Speculator | None" = None, max_loras: int | None = None, policy: str = FCFS):
        self.kv = kv
        self.speculator = speculator
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.max_loras = max_loras  # distinct LoRA adapters running at once (None: LoRA off)
        self.policy = policy
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.counters = SchedulerCounters()

    def add(self, req: Request) -> None:
        self._enqueue(self.waiting, req)

    def _enqueue(self, queue: deque[Request] | list[Request], req: Request) -> None:
        """Appends; under the priority policy inserts by rank, after its equals (ties keep their order)."""
        if self.policy == PRIORITY:
            bisect.insort(queue, req, key=rank)
        else:
            queue.append(req)

    def _yields(self, req: Request) -> bool:
        """Whether a running request's prompt chunk waits for the admission of a waiting request ranked above it."""
        return self.policy == PRIORITY and bool(self.waiting) and not _decodes(req) \
            and rank(self.waiting[0]) < rank(req)

    def schedule(self, prefill_budget: int | None = None) -> SchedulerOutput:
        """The next step. `prefill_budget` caps its prefill tokens when it also decodes (None: no cap)."""
        out = SchedulerOutput()
        self._make_room(out)
        made_room = len(out.preempted)
        budget = self.max_num_batched_tokens
        decoding = any(_decodes(r) for r in self.running)
        prefill = budget if prefill_budget is None or not decoding else prefill_budget
        decodes = [r for r in self.running if _decodes(r)]
        if self.speculator is not None and decodes:
            self.speculator.propose(decodes)
        pending = len(decodes)  # decodes not yet scheduled: drafts leave each a token and a block
        yielding = [r for r in self.running if self._yields(r)]
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req in yielding:
                i += 1
                continue
            is_prefill = not _decodes(req)
            num_new = self._chunk(req.num_tokens - req.num_computed_tokens, min(budget, prefill) if is_prefill
                                  else budget)
            if num_new == 0:
                i += 1
                continue
            num_spec = 0
            if not is_prefill:
                pending -= 1
                # Drafts ride along only in budget and blocks no other decode needs: never at others' expense.
                want = min(len(req.spec_token_ids), budget - num_new - pending)
                if want > 0 and self.kv.allocate(req, num_new + want) and self.kv.pool.num_free >= pending:
                    num_spec = want
                self.kv.trim(req, req.num_computed_tokens + num_new + num_spec)  # slots of drafts not verified
                del req.spec_token_ids[num_spec:]
            while not num_spec and not self.kv.allocate(req, num_new):
                victim = self.running.pop()  # newest (lowest-ranked under the priority policy)
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    break
            else:
                out.seqs.append(ScheduledSeq(req, num_new + num_spec, num_spec))
                budget -= num_new + num_spec
                prefill -= num_new if is_prefill else 0
                i += 1
        # Admitting new work while others were just preempted for blocks would only thrash.
        skipped = []  # requests for an adapter with no slot free now: later ones may go first, these keep their place
        while len(out.preempted) == made_room and self.waiting and budget > 0:
            req = self.waiting[0]
            if len(self.running) + 1 + len(req.forks) > self.max_num_seqs:
                break
            if yielding and rank(req) > rank(yielding[0]):  # below a prompt that yielded: it goes first
                break
            if not admits(req.lora and req.lora.id, {r.lora.id for r in self.running if r.lora}, self.max_loras):
                skipped.append(self.waiting.popleft())
                continue
            hit_ids, hit_hashes = self.kv.computed_prefix(req)
            num_cached = len(hit_ids) * self.kv.block_size
            num_new = self._chunk(req.num_tokens - num_cached, min(budget, prefill))
            if num_new == 0 or not self.kv.allocate(req, num_new, hit_ids, hit_hashes):
                break
            self.waiting.popleft()
            req.num_computed_tokens = num_cached
            req.status = Status.RUNNING
            if req.num_cached_tokens < 0:  # first admission (not a recompute after preemption)
                req.num_cached_tokens = num_cached
                req.metrics.first_scheduled_time = time.time()
                self.counters.prefix_queries += req.num_prompt_tokens
                self.counters.prefix_hits += num_cached
            self._enqueue(self.running, req)
            out.seqs.append(ScheduledSeq(req, num_new))
            budget -= num_new
            prefill -= num_new
        self.waiting.extendleft(reversed(skipped))
        # The prompts that yielded, in rank order, from the budget left; never preempting for it (they rank below
        # what was scheduled), so one whose blocks are short waits for the next step.
        for req in yielding:
            num_new = self._chunk(req.num_tokens - req.num_computed_tokens, min(budget, prefill))
            if req.status is Status.RUNNING and num_new and self.kv.allocate(req, num_new):
                out.seqs.append(ScheduledSeq(req, num_new))
                budget -= num_new
                prefill -= num_new
        return out

    def _make_room(self, out: SchedulerOutput) -> None:
        """Preempts running requests of a lower priority (a higher number), lowest-ranked first, until the first
        waiting request has a seat and the blocks of a full first chunk. A strictly lower priority only, so the
        preempted never preempt back; a request whose adapter has no slot free waits as under fcfs."""
        if self.policy != PRIORITY or not self.waiting:
            return
        req = self.waiting[0]
        if not admits(req.lora and req.lora.id, {r.lora.id for r in self.running if r.lora}, self.max_loras):
            return
        hit_ids, _ = self.kv.computed_prefix(req)
        chunk = min(req.num_tokens - len(hit_ids) * self.kv.block_size, self.max_num_batched_tokens)
        while self.running and self.running[-1].priority > req.priority and (
                len(self.running) + 1 + len(req.forks) > self.max_num_seqs
                or self.kv.free_blocks_needed(req, chunk, hit_ids) > self.kv.pool.num_free):
            victim = self.running.pop()
            self._preempt(victim)
            out.preempted.append(victim)

    def _chunk(self, remaining: int, budget: int) -> int:
        if self.chunked_prefill:
            return min(remaining, budget)
        return remaining if remaining <= budget else 0

    @property
    def num_prefill_tokens_waiting(self) -> int:
        """Prompt tokens queued or admitted whose prefill has not run yet."""
        return sum(req.num_tokens - req.num_computed_tokens for req in (*self.waiting, *self.running)
                   if not _decodes(req))

    def fork(self, req: Request) -> list[Request]:
        """Starts the sequences waiting for req's prompt (its forks) on req's blocks, now that it is computed."""
        forks, req.forks = req.forks, []
        for seq in forks:
            self.kv.fork(req, seq)
            seq.num_computed_tokens, seq.num_cached_tokens = req.num_computed_tokens, req.num_cached_tokens
            seq.status = Status.RUNNING
            self._enqueue(self.running, seq)
        return forks

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.spec_token_ids, req.draft_computed = [], 0
        req.status = Status.WAITING
        if self.policy == PRIORITY:
            self._enqueue(self.waiting, req)
        else:
            self.waiting.appendleft(req)
        self.counters.num_preemptions += 1

    def finish(self, req: Request) -> None:
        """Drops a finished or aborted request from the queues and frees its blocks at once."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.free(req)
        req.status = Status.FINISHED


def _decodes(req: Request) -> bool:
    """Whether the request's next step is a decode (one new token after its prompt was prefilled)."""
    return bool(req.output_token_ids) and req.num_tokens - req.num_computed_tokens == 1
