"""A continuous-batching replica model, calibrated from a profile that `floodway bench engine --profile-out` writes.

Each engine step decodes one token for every decoding request and spends the rest of the token budget on
chunked prefill (by priority, then oldest admitted: a prompt being prefilled yields to one admitted after it with a
lower priority number, as the engine's scheduler does); its duration is decode_step(batch) + prefill_chunk /
prefill_tokens_per_s + kv_tokens * decode_s_per_kv_token. A request's first token comes out of the step that
finishes its prefill. Admission reserves KV for prompt + output; a request with no seat or KV left preempts
running ones of a lower priority (a higher number), lowest-ranked first, as the engine's priority policy does:
they queue again and recompute their prompt and the tokens they had. Steps with no
event in them are taken in bulk, so an hour of traffic simulates in seconds. With a TPOT SLO (the engine's
--tpot-slo-ms, which the operator sets from the spec), a step that decodes carries only the prefill that
keeps it within the SLO: the engine's own budget function, fed the profile's step costs. The modelled steps
also feed the engine's StepTimes, whose prefill rate the replica exports as an engine does (the gateway's
prediction reads it).

With `prefix_cache` on, a replica keeps the block ids of the prompts it served in an LRU as large as its KV
capacity (a request's leading blocks touched last, as the engine frees a request's tail first); a request's
leading blocks found there are not prefilled again (never its last token), and the hits are counted as the
engine's vllm:prefix_cache_hits/queries.
"""

import bisect
import heapq
import json
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

from floodway.engine.prefill_budget import HEADROOM, StepTimes, prefill_budget_tokens
from floodway.operator.simulator.traces import BLOCK_TOKENS

# Defaults shaped like an 8B Llama-style model (GQA, 8 KV heads) in bf16 on one H100 80GB under vLLM-like
# serving: ~25k prefill tok/s at 2048-token chunks, ~10 ms decode step at batch 1 rising with batch size,
# ~450k KV tokens at 0.9 memory utilisation, KV reads at ~3 TB/s (128 KiB per token).
DEFAULT_DECODE_STEP_S = {1: 0.010, 8: 0.012, 32: 0.016, 128: 0.030, 256: 0.050}


@dataclass(frozen=True)
class ReplicaProfile:
    model: str = "default-8b-h100"
    gpu: str | None = "h100-80gb"  # the GPU type (planner's table) the profile was measured on; None: unknown
    prefill_tokens_per_s: float = 25_000.0
    decode_step_s: dict = field(default_factory=lambda: dict(DEFAULT_DECODE_STEP_S))
    kv_capacity_tokens: int = 450_000
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    decode_s_per_kv_token: float = 4e-8

    def __post_init__(self):
        pts = {int(k): float(v) for k, v in self.decode_step_s.items()}
        problems = []
        if not pts or min(pts) < 1 or min(pts.values()) <= 0:
            problems.append("decode_step_s needs batch sizes >= 1 with positive step times")
        for name in ("prefill_tokens_per_s", "kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if self.decode_s_per_kv_token < 0:
            problems.append("decode_s_per_kv_token must be >= 0")
        if problems:
            raise ValueError("bad replica profile: " + "; ".join(problems))
        object.__setattr__(self, "decode_step_s", dict(sorted(pts.items())))

    @classmethod
    def from_json(cls, path: str | Path) -> "ReplicaProfile":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read replica profile {path}: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"replica profile {path}: expected a JSON object")
        # A measured decode step already includes reading the KV of its context (bench engine records
        # decode_context_tokens), so a profile adds no KV-read term unless it names one.
        data = {"decode_s_per_kv_token": 0.0, "gpu": None, **data}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def decode_sequences(self, tpot_slo_s: float) -> int:
        """Sequences one replica decodes at once within the TPOT SLO: the largest batch (up to max_num_seqs) whose
        decode step fits the share of the SLO the engine's prefill budget leaves decodes (0: not even one). At the
        profile's own context length: a measured step includes reading that much KV per sequence."""
        limit = HEADROOM * tpot_slo_s
        return max((b for b in range(1, self.max_num_seqs + 1) if self.decode_step(b) <= limit), default=0)

    def decode_step(self, batch: int) -> float:
        """Step time for `batch` decoding sequences: piecewise-linear through the profile points."""
        xs = list(self.decode_step_s)
        ys = list(self.decode_step_s.values())
        if len(xs) == 1:
            return ys[0]
        if batch <= xs[0]:
            return ys[0]
        i = min(bisect.bisect_left(xs, batch), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (batch - x0) / (x1 - x0)


class SimRequest:
    __slots__ = ("arrival_s", "prompt", "output", "blocks", "adapter", "tenant", "klass", "priority", "left",
                 "done", "admitted", "first_token_s", "finish_s", "where")

    def __init__(self, arrival_s: float, prompt: int, output: int, blocks: tuple[int, ...] = (),
                 adapter: str | None = None, tenant: str | None = None, klass: str | None = None):
        self.arrival_s, self.prompt, self.output, self.blocks, self.adapter = arrival_s, prompt, output, blocks, adapter
        self.tenant, self.klass = tenant, klass  # traces.TraceRequest's
        self.priority = 0  # what the gateway sends the engines (its class's, with engine.schedulingPolicy priority)
        self.left = prompt  # prefill tokens still to compute
        self.done = 0  # output tokens it had when last preempted (its recompute prefills them too)
        self.admitted = 0  # the replica's admission count when it was admitted (the newest is preempted first)
        self.first_token_s = self.finish_s = None
        self.where = ""  # "local", "overflow", "rejected" (capacity) or "refused" (its tenant's limits)

    @property
    def ttft_s(self) -> float:
        """Seconds from its arrival to its first token (once it has one)."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean seconds per output token after the first, once it finished (None: unfinished, or one token)."""
        if self.finish_s is None or self.output <= 1:
            return None
        return (self.finish_s - self.first_token_s) / (self.output - 1)


class Replica:
    """One engine: a waiting queue, chunked prefill, and a decode batch. Time only moves via advance_to()."""

    def __init__(self, profile: ReplicaProfile, now: float, on_finish, tpot_slo_s: float | None = None,
                 prefix_cache: bool = False):
        self.p, self.now, self.on_finish, self.tpot_slo_s = profile, now, on_finish, tpot_slo_s
        self.prefix_cache = prefix_cache
        self.cache: OrderedDict[int, None] = OrderedDict()  # block ids, least recently used first
        self.prefix_hits = self.prefix_queries = 0  # prompt tokens found in the cache / looked up
        self.queue: deque[SimRequest] = deque()  # not admitted yet ("waiting")
        self.prefilling: deque[SimRequest] = deque()
        self.decoding: list = []  # heap of (finish_step, seq, request)
        self.step_no = 0
        self.kv_used = 0
        self.kv_ctx = 0  # context tokens of decoding requests (drives the KV-read term)
        self._seq = 0
        self._admissions = 0
        self.running_priorities: dict[int, int] = {}  # admitted requests per priority number
        self.busy_s = 0.0  # time spent in steps (GPU utilisation)
        self.step_times = StepTimes()  # the engine's own moving averages, fed the modelled steps

    # Metrics as an engine exports them.
    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.p.kv_capacity_tokens

    @property
    def busy(self) -> bool:
        return bool(self.queue or self.prefilling or self.decoding)

    @property
    def backlog(self) -> int:
        """Prompt tokens waiting for prefill (the engine's floodway_num_prefill_tokens_waiting)."""
        return sum(r.left for r in self.prefilling) + sum(r.left for r in self.queue)

    @property
    def prefill_rate(self) -> float | None:
        """Prompt tokens/s while decoding, from the steps run so far (the engine's floodway_prefill_tokens_per_second;
        None before a prefill)."""
        return self.step_times.prefill_rate(self.tpot_slo_s or 0.0, self.p.max_num_batched_tokens)

    def _decode_s(self, b: int) -> float:
        return (self.p.decode_step(b) if b else 0.0) + self.kv_ctx * self.p.decode_s_per_kv_token

    def _prefill_cap(self, b: int) -> int:
        """Prefill tokens the next step may carry beside `b` decodes."""
        cap = max(self.p.max_num_batched_tokens - b, 0)
        if b and self.tpot_slo_s:
            cap = min(cap, prefill_budget_tokens(self.tpot_slo_s, self._decode_s(b), 1 / self.p.prefill_tokens_per_s,
                                                 cap))
        return cap

    def fits(self, req: SimRequest) -> bool:
        return req.prompt + req.output <= self.p.kv_capacity_tokens

    def cached_blocks(self, blocks: tuple[int, ...]) -> int:
        """How many of these leading blocks the prefix cache holds."""
        n = 0
        while n < len(blocks) and blocks[n] in self.cache:
            n += 1
        return n

    def _lookup(self, req: SimRequest) -> None:
        hit = min(self.cached_blocks(req.blocks) * BLOCK_TOKENS, req.prompt - 1)
        req.left = req.prompt - hit
        self.prefix_hits += hit
        self.prefix_queries += req.prompt
        for block in reversed(req.blocks):
            self.cache[block] = None
            self.cache.move_to_end(block)
        while len(self.cache) > self.p.kv_capacity_tokens // BLOCK_TOKENS:
            self.cache.popitem(last=False)

    def submit(self, req: SimRequest, t: float) -> None:
        """Queue a request at time t; it joins the first step that starts at or after t."""
        self.advance_to(t)
        if self.prefix_cache:
            self._lookup(req)
        self._enqueue(self.queue, req)
        self._admit()

    @staticmethod
    def _enqueue(q: deque, req: SimRequest) -> None:
        """Priority scheduling (vLLM's order, lower numbers first, without preemption): a request waits behind those
        of its priority number or a lower one and ahead of the rest; all of one priority (fcfs): in arrival order."""
        if not q or q[-1].priority <= req.priority:
            q.append(req)
            return
        q.insert(next(i for i, r in enumerate(q) if r.priority > req.priority), req)

    def _admit(self) -> None:
        while self.queue:
            r = self.queue[0]
            while not self._room(r) and self._preempt_below(r.priority):
                pass
            if not self._room(r):
                return
            self.kv_used += r.prompt + r.output
            self._admissions += 1
            r.admitted = self._admissions
            self.running_priorities[r.priority] = self.running_priorities.get(r.priority, 0) + 1
            self._enqueue(self.prefilling, self.queue.popleft())

    def _room(self, r: SimRequest) -> bool:
        return self.running < self.p.max_num_seqs and self.kv_used + r.prompt + r.output <= self.p.kv_capacity_tokens

    def _preempt_below(self, priority: int) -> bool:
        """Preempts the lowest-ranked running request of a priority number above `priority` (of the highest number,
        the newest admitted); False: none runs."""
        low = max((p for p, n in self.running_priorities.items() if n), default=priority)
        if low <= priority:
            return False
        entries = [(r.admitted, r, None) for r in self.prefilling if r.priority == low]
        entries += [(r.admitted, r, i) for i, (_, _, r) in enumerate(self.decoding) if r.priority == low]
        _, r, i = max(entries, key=lambda e: e[0])
        if i is None:
            self.prefilling.remove(r)
        else:
            finish_step = self.decoding[i][0]
            self.decoding[i] = self.decoding[-1]
            self.decoding.pop()
            heapq.heapify(self.decoding)
            had = r.output - (finish_step - self.step_no)  # tokens out so far: its KV context is one fewer
            self.kv_ctx -= r.prompt + had - 1
            r.done = had
        r.left = r.prompt + r.done
        self._release(r)
        # Back in line ahead of its equals, which arrived after it (the engine ranks by priority, then arrival).
        self.queue.insert(next((k for k, w in enumerate(self.queue) if w.priority >= r.priority), len(self.queue)), r)
        return True

    def _release(self, r: SimRequest) -> None:
        self.kv_used -= r.prompt + r.output
        self.running_priorities[r.priority] -= 1

    def _shape(self) -> tuple[int, int, float]:
        """(decode batch, prefill tokens per step, step seconds) for the next step."""
        b = len(self.decoding)
        chunk = min(self._prefill_cap(b), sum(r.left for r in self.prefilling)) if self.prefilling else 0
        return b, chunk, self._decode_s(b) + chunk / self.p.prefill_tokens_per_s

    def advance_to(self, t: float) -> None:
        """Run whole steps until the first step boundary at or after t (or until idle)."""
        while self.now < t:
            if not (self.prefilling or self.decoding):
                self.now = t
                return
            b, chunk, dt = self._shape()
            # Steps that neither finish a prefill nor a decode can be taken in bulk.
            quiet = math.inf
            if self.decoding:
                quiet = self.decoding[0][0] - self.step_no - 1
            if self.prefilling:
                quiet = min(quiet, (self.prefilling[0].left - 1) // chunk if chunk else 0)
            need = math.ceil((t - self.now) / dt)
            n = int(min(quiet, need))
            if n > 0:
                self._observe(b, chunk, dt, n)
                self.step_no += n
                self.now += n * dt
                self.busy_s += n * dt
                if self.prefilling:
                    self.prefilling[0].left -= n * chunk
                self.kv_ctx += n * b
                continue
            self._step(chunk, dt)

    def _observe(self, b: int, chunk: int, dt: float, n: int = 1) -> None:
        """n equal steps into the engine's moving averages (past 20, earlier ones weigh ~1%)."""
        for _ in range(min(n, 20)):
            self.step_times.observe(b, chunk, dt)

    def _step(self, chunk: int, dt: float) -> None:
        self._observe(len(self.decoding), chunk, dt)
        self.step_no += 1
        self.now += dt
        self.busy_s += dt
        self.kv_ctx += len(self.decoding)
        while chunk > 0 and self.prefilling:
            r = self.prefilling[0]
            used = min(chunk, r.left)
            r.left -= used
            chunk -= used
            if r.left:
                break
            self.prefilling.popleft()
            if r.first_token_s is None:
                r.first_token_s = self.now
            if r.output - r.done <= 1:
                self._finish(r)
            else:
                self._seq += 1
                self.kv_ctx += r.prompt + r.done
                heapq.heappush(self.decoding, (self.step_no + r.output - r.done - 1, self._seq, r))
        while self.decoding and self.decoding[0][0] <= self.step_no:
            r = heapq.heappop(self.decoding)[2]
            self.kv_ctx -= r.prompt + r.output - 1
            self._finish(r)
        self._admit()

    def _finish(self, r: SimRequest) -> None:
        r.finish_s = self.now
        self._release(r)
        self.on_finish(r)
