"""Iteration-level scheduling: one token budget per step, running requests first (decodes and prefill chunks),
then waiting ones; preemption by recompute, newest first, when KV blocks run out. A step that decodes may
carry at most `prefill_budget` prefill tokens (TPOT protection, engine/prefill_budget.py).

A request with n > 1 sequences queues as one (its first sequence, carrying the others as `forks`) and takes
seats for all of them at admission; once its prompt is prefilled the others fork off it, sharing its blocks.
From then on each sequence is scheduled, preempted and recomputed on its own."""

import time
from collections import deque
from dataclasses import dataclass, field

from floodway.engine.kv_manager import KVManager
from floodway.engine.request import Request, Status


@dataclass
class ScheduledSeq:
    req: Request
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the request's tokens, so its last logits give the next token."""
        return self.req.num_computed_tokens + self.num_new_tokens == self.req.num_tokens


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
    def __init__(self, kv: KVManager, max_num_seqs: int, max_num_batched_tokens: int, chunked_prefill: bool):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.counters = SchedulerCounters()

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def schedule(self, prefill_budget: int | None = None) -> SchedulerOutput:
        """The next step. `prefill_budget` caps its prefill tokens when it also decodes (None: no cap)."""
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        decoding = any(_decodes(r) for r in self.running)
        prefill = budget if prefill_budget is None or not decoding else prefill_budget
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            is_prefill = not _decodes(req)
            num_new = self._chunk(req.num_tokens - req.num_computed_tokens, min(budget, prefill) if is_prefill
                                  else budget)
            if num_new == 0:
                i += 1
                continue
            while not self.kv.allocate(req, num_new):
                victim = self.running.pop()  # newest
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    break
            else:
                out.seqs.append(ScheduledSeq(req, num_new))
                budget -= num_new
                prefill -= num_new if is_prefill else 0
                i += 1
        # Admitting new work while others were just preempted would only thrash.
        while not out.preempted and self.waiting and budget > 0:
            req = self.waiting[0]
            if len(self.running) + 1 + len(req.forks) > self.max_num_seqs:
                break
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
            self.running.append(req)
            out.seqs.append(ScheduledSeq(req, num_new))
            budget -= num_new
            prefill -= num_new
        return out

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
            self.running.append(seq)
        return forks

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.status = Status.WAITING
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
