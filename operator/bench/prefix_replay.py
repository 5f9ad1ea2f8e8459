"""Offline replay of `floodway bench routing`: where each router sends the bench's requests and what the engines'
prefix caches then hold, with no processes.

The engines are the engine's own scheduler and KV manager (floodway.engine.scheduler, kv_manager: the token
budget, max_num_seqs, chunked prefill, the block pool's LRU, blocks cached only once computed) stepped in
simulated time without a model: each step takes `step_s` and every sampled token is a dummy. The router is the
gateway's own: `routing.pick` or `routing.pick_prefix` over the loads a fresh scrape shows, with the prefix index
learnt from what was routed (`prefix_index.PrefixIndex` over the gateway's text keys, or over the engine's token
blocks) or read from the engines' caches themselves (what engine-published block events would give at best).

Each request's prefix-cache miss against the single-engine bound is put down to one cause, at the first block the
bound has and the engine did not: `elsewhere` (that prefix had never been routed to this engine: the router sent
it away from its holder), `in flight` (routed there, not computed yet when the request was admitted), `evicted`
(computed there, gone by admission). torch-free, but it imports floodway.engine's scheduler: load it on demand.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace

from floodway.engine.block_pool import chain_hash
from floodway.engine.kv_manager import KVManager
from floodway.engine.outputs import RequestMetrics
from floodway.engine.request import Request
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import Scheduler
from floodway.operator.bench.routing import (
    ENGINE_BLOCK,
    bound_blocks,
    first_turns,
    mooncake_conversations,
    render,
    single_engine_bound,
    spread,
    token_ids,
    words,
)
from floodway.operator.gateway.prefix_index import PrefixIndex, request_keys
from floodway.operator.gateway.routing import (
    BackendLoad,
    PrefixPolicy,
    RoutingWeights,
    decayed,
    pick,
    pick_prefix,
    sent_work,
    uncached_tokens,
)
from floodway.operator.stats import quantile

CAUSES = ("elsewhere", "in flight", "evicted")


@dataclass(frozen=True)
class EngineShape:
    num_blocks: int = 256
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 64
    max_tokens: int = 4
    step_s: float = 1.0  # simulated seconds per engine step


@dataclass(frozen=True)
class Router:
    name: str
    prefix: PrefixPolicy | None = None  # None: load only
    learn: str = "text"  # the index: "text" (the gateway's keys), "tokens" (the engine's blocks), "engine" (its cache)
    weights: RoutingWeights = RoutingWeights()


@dataclass
class ReplayResult:
    hit_tokens: int = 0
    prompt_tokens: int = 0
    ttft: list[float] = field(default_factory=list)  # per request, in arrival order
    served: Counter = field(default_factory=Counter)  # engine -> requests
    prefill: Counter = field(default_factory=Counter)  # engine -> prompt tokens computed (not cache hits)
    lost: Counter = field(default_factory=Counter)  # cause -> prompt tokens the bound hits and the engine did not

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class _Engine:
    def __init__(self, shape: EngineShape):
        self.kv = KVManager(shape.num_blocks, ENGINE_BLOCK)
        self.sched = Scheduler(self.kv, shape.max_num_seqs, shape.max_num_batched_tokens, chunked_prefill=True)
        self.in_flight = 0
        self.pending: dict[Request, int] = {}  # the gateway's count: uncached prompt tokens before the first token
        self.recent, self.recent_at = 0.0, 0.0  # the gateway's work sent here (routing.sent_work, decayed), when last
        self.routed: dict[int, int] = {}  # engine block hash -> the first request routed here with it
        self.computed: set[int] = set()  # engine block hashes ever cached here

    def load(self, i: int, t: float, half_life_s: float) -> BackendLoad:
        pool = self.kv.pool
        return BackendLoad(str(i), True, self.in_flight, len(self.sched.waiting), len(self.sched.running),
                           (pool.num_total - pool.num_free) / pool.num_total,
                           max(self.sched.num_prefill_tokens_waiting, sum(self.pending.values())),
                           decayed(self.recent, t - self.recent_at, half_life_s))

    def cached(self, keys: list[int]) -> int:
        """Leading blocks of these engine block hashes in the cache now."""
        n = 0
        while n < len(keys) and keys[n] in self.kv.pool.cached:
            n += 1
        return n


def engine_keys(ids: list[int]) -> list[int]:
    """The engine's chained hashes of a prompt's full blocks (block_pool.chain_hash)."""
    keys, parent = [], None
    for i in range(len(ids) // ENGINE_BLOCK):
        parent = chain_hash(parent, tuple(ids[i * ENGINE_BLOCK:(i + 1) * ENGINE_BLOCK]))
        keys.append(parent)
    return keys


def replay(prompts: list[list[int]], texts: list[str], rate: float, engines: int, shape: EngineShape,
           router: Router, seed: int = 0) -> ReplayResult:
    """Request i (prompt text `texts[i]`, its token ids `prompts[i]`) arrives at i / rate."""
    rng, weights, index = random.Random(seed), router.weights, PrefixIndex()
    pool = [_Engine(shape) for _ in range(engines)]
    for j in range(engines):
        index.set_capacity(str(j), shape.num_blocks)
    blocks = [engine_keys(ids) for ids in prompts]
    keys = {"text": lambda: [request_keys({"prompt": t}) for t in texts], "engine": lambda: blocks,
            "tokens": lambda: [request_keys({"prompt": ids}) for ids in prompts]}[router.learn]()
    bound = bound_blocks(prompts)
    result = ReplayResult(ttft=[math.nan] * len(prompts))
    where: dict[Request, tuple[int, int]] = {}  # request -> (its index, its engine)
    pending: dict[int, list] = {}  # engine -> the scheduled sequences of its current step
    events = [(i / rate, 0, i) for i in range(len(prompts))]  # (t, 0: request i arrives | 1: engine i's step ends)
    heapq.heapify(events)
    admitted: set[Request] = set()

    def start_step(e: int, t: float) -> None:
        out = pool[e].sched.schedule()
        for s in out.seqs:
            if s.req not in admitted:  # its first admission: the engine looked its prompt up in the cache
                admitted.add(s.req)
                account(s.req, pool[e])
        if out.seqs:
            pending[e] = out.seqs
            heapq.heappush(events, (t + shape.step_s, 1, e))

    def account(req: Request, eng: _Engine) -> None:
        i, e = where[req]
        result.prefill[e] += req.num_prompt_tokens - req.num_cached_tokens
        got = req.num_cached_tokens // ENGINE_BLOCK
        result.hit_tokens += req.num_cached_tokens
        result.prompt_tokens += req.num_prompt_tokens
        if got < bound[i]:
            first_missing = blocks[i][got]
            cause = "elsewhere" if eng.routed.get(first_missing, i) == i else \
                "evicted" if first_missing in eng.computed else "in flight"
            result.lost[cause] += (bound[i] - got) * ENGINE_BLOCK

    def end_step(e: int, t: float) -> None:
        eng = pool[e]
        for s in pending.pop(e):
            req, samples = s.req, s.samples  # before the step's tokens count as computed
            req.num_computed_tokens += s.num_new_tokens
            eng.kv.cache_filled_blocks(req)
            eng.computed.update(eng.kv.req_hashes.get(req, ()))
            if samples:
                req.append_token(0)
                if req.metrics.first_token_time is None:
                    req.metrics.first_token_time = t
                    del eng.pending[req]
                    result.ttft[where[req][0]] = t - req.metrics.arrival_time
                if len(req.output_token_ids) >= shape.max_tokens:
                    eng.sched.finish(req)
                    eng.in_flight -= 1
        start_step(e, t)

    def arrive(i: int, t: float) -> None:
        loads = [eng.load(j, t, weights.recent_half_life_s) for j, eng in enumerate(pool)]
        mine, hits = keys[i], {}
        if router.prefix is None:
            chosen = pick(loads, rng, weights)
        else:
            if mine and router.learn == "engine":
                hits = {str(j): eng.cached(mine) / len(mine) for j, eng in enumerate(pool)}
            elif mine:
                hits = {str(j): index.matched(str(j), mine) / len(mine) for j in range(engines)}
            chosen = pick_prefix(loads, hits, rng, weights, router.prefix, prompt_tokens=len(prompts[i]))
            index.record(chosen.id, mine)
        e = int(chosen.id)
        eng = pool[e]
        req = Request(str(i), list(prompts[i]), SamplingParams(max_tokens=shape.max_tokens), RequestMetrics(t))
        where[req] = i, e
        eng.pending[req] = uncached_tokens(len(prompts[i]), hits.get(chosen.id, 0.0))
        eng.recent, eng.recent_at = loads[e].recent_work + sent_work(eng.pending[req], weights), t
        for key in blocks[i]:
            eng.routed.setdefault(key, i)
        eng.in_flight += 1
        result.served[e] += 1
        eng.sched.add(req)
        if e not in pending:
            start_step(e, t)

    while events:
        t, kind, i = heapq.heappop(events)
        (end_step if kind else arrive)(i, t)
    return result


def routers() -> list[Router]:
    """The routers the replay compares: load only, the shipped prefix-aware one, the same with the index of the
    engine's token blocks or with the engine's cache itself (what published block events give at best, with no
    lag), with a looser cap (1.5 x mean + 2) or none."""
    shipped = PrefixPolicy()
    return [Router("load-only"), Router("prefix-aware", shipped), Router("+ token keys", shipped, "tokens"),
            Router("+ engine cache", shipped, "engine"),
            Router("cap 1.5x+2", replace(shipped, prefix_load_cap=1.5, prefix_load_slack=2.0)),
            Router("no cap", replace(shipped, prefix_load_cap=float("inf")))]


def ttft_at_bound(prompts: list[list[int]], shape: EngineShape) -> list[float]:
    """Each request's TTFT on an idle engine holding all the single-engine bound holds: its uncached tokens in
    chunks of the step's token budget, the last chunk's step sampling the first token. No router does better on
    a quiet machine."""
    return [math.ceil((len(ids) - ENGINE_BLOCK * held) / shape.max_num_batched_tokens) * shape.step_s
            for ids, held in zip(prompts, bound_blocks(prompts), strict=True)]


def report(engines: int, conversations_n: int, rate: float, shape: EngineShape, max_blocks: int,
           step_s: list[float], seeds: int, traces: str | None = None) -> str:
    """The replay of `floodway bench routing`'s Mooncake-shaped workload, per simulated step time and router,
    averaged over `seeds` (the power-of-two choices' draws)."""
    if min(engines, conversations_n, seeds, max_blocks) < 1 or rate <= 0 or not step_s or min(step_s) <= 0:
        raise ValueError("counts must be >= 1, rate and step times > 0")
    requests = mooncake_conversations(conversations_n, max_blocks, traces)
    texts, first = [render(ids, 0, words()) for ids in requests], first_turns(requests)
    prompts = token_ids(texts)
    bound_hits, bound_total = single_engine_bound(prompts)
    bound = bound_hits / bound_total
    out = [f"routing replay (no processes): {engines} engines ({shape.num_blocks} KV blocks, {shape.max_num_seqs} "
           f"sequences, {shape.max_num_batched_tokens} tokens a step, {shape.max_tokens} output tokens), "
           f"{len(prompts)} requests at {rate:g}/s, "
           f"mean of {seeds} seeds; single-engine bound {bound:.1%}; lost: share of the bound's hit tokens missed, "
           f"by cause; TTFT p50 of all requests ({sum(first)} first turns), and of later turns alone",
           f"{'step':>5} {'router':<16} {'hit rate':>8} {'of bound':>8} {'TTFT p50':>9} {'x load':>6} {'later':>7} "
           f"{'req max/mean':>12} {'prefill max/mean':>16}  lost: " + " / ".join(CAUSES)]
    for step in step_s:
        base = None
        for router in routers():
            runs = [replay(prompts, texts, rate, engines, replace(shape, step_s=step), router, seed)
                    for seed in range(seeds)]
            hit = sum(r.hit_rate for r in runs) / seeds
            p50 = sum(quantile(r.ttft, 0.5) for r in runs) / seeds
            later = sum(quantile([x for x, f in zip(r.ttft, first, strict=True) if not f], 0.5)
                        for r in runs) / seeds
            base = base or p50
            req = sum(spread([r.served[e] for e in range(engines)]) for r in runs) / seeds
            work = sum(spread([r.prefill[e] for e in range(engines)]) for r in runs) / seeds
            lost = " / ".join(f"{sum(r.lost[c] for r in runs) / seeds / bound_hits:.1%}" for c in CAUSES)
            out.append(f"{step:>4g}s {router.name:<16} {hit:>8.1%} {hit / bound:>8.1%} {p50:>8.2f}s "
                       f"{p50 / base:>6.2f} {later:>6.2f}s {req:>12.2f} {work:>16.2f}  {lost}")
        best = ttft_at_bound(prompts, replace(shape, step_s=step))
        later = quantile([x for x, f in zip(best, first, strict=True) if not f], 0.5)
        out.append(f"{step:>4g}s {'at the bound':<16} {'':>8} {'':>8} {quantile(best, 0.5):>8.2f}s "
                   f"{quantile(best, 0.5) / base:>6.2f} {later:>6.2f}s"
                   "   (idle engines holding all the single-engine bound holds: the best TTFT without queueing)")
    return "\n".join(out)
