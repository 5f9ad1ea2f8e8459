"""The live backend table: which engines exist, which are ready, and how loaded each is.

Every scrape interval each engine's readiness path (its runtime's: /ready for ours, /health for vLLM) is
probed and its /metrics read (queue, running, KV usage);
the gateway adds its own in-flight counts, which are always fresh. A probe that times out is a miss: a ready engine
leaves rotation at MISSES_UNREADY in a row (a busy engine answers late, and late is load, not ill health), at once
when it answers anything but 200 or refuses the connection. Routing and the overflow rule read
this table through plain snapshots (BackendLoad, pool totals) and stay pure. When an engine turns ready its
/v1/models is read once for the LoRA adapters it serves (adapters.AdapterIndex); what it cached and held is
forgotten when it turns unready or leaves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass

import aiohttp
from floodway.engine.config import EngineConfig
from floodway.operator.gateway.adapters import AdapterIndex, adapter_hits
from floodway.operator.gateway.prefix_index import BLOCK_TOKENS, PrefixIndex
from floodway.operator.gateway.routing import (
    BackendLoad,
    PrefixPolicy,
    RoutingWeights,
    decayed,
    estimate_waiting,
    pick,
    pick_prefix,
    sent_work,
    uncached_tokens,
)
from floodway.operator.gateway.ttft import SlotHold, admission_wait_s, slot_hold_update
from floodway.operator.runtimes import DEFAULT, RUNTIMES, MetricNames, Runtime
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("floodway.gateway")
# Probes in a row that time out before a ready engine leaves rotation (kubelet's readiness failureThreshold is 3 by
# default): one engine step over the probe's timeout under load must not send its traffic to the overflow API.
MISSES_UNREADY = 3

_INFO = "vllm:cache_config_info"  # capacity as labels; max_num_seqs is ours (vLLM's has the KV labels only)
_KV_LABELS = ("num_gpu_blocks", "block_size")  # KV capacity (vLLM's too): the size of the gateway's prefix index
_BACKLOG = "floodway_num_prefill_tokens_waiting"  # ours only: prompt tokens not yet prefilled
_RATE = "floodway_prefill_tokens_per_second"  # ours only: its prefill rate while decoding, from its step times


def parse_engine_load(text: str, names: MetricNames = RUNTIMES[DEFAULT].metrics) -> dict[str, float]:
    """{waiting, running, kv_usage, max_num_seqs, kv_tokens, prefill_waiting, prefill_rate, finished} from an
    engine's Prometheus text (the runtime's `names`), summed over label sets; absent gauges read 0. Only the lines
    of these gauges and of the finished-requests counter are parsed: engines also export many histogram buckets."""
    gauges = names.gauges()
    wanted = "\n".join(line for line in text.splitlines()
                       if line.startswith((*gauges, *names.finished, _INFO, _BACKLOG, _RATE)))
    found: dict[str, float] = {}
    max_num_seqs = kv_tokens = 0.0
    for family in text_string_to_metric_families(wanted + "\n"):
        for sample in family.samples:
            if sample.name in gauges or sample.name in (_BACKLOG, _RATE) or sample.name in names.finished:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
            elif sample.name == _INFO and sample.labels.get("max_num_seqs", "").isdigit():
                max_num_seqs += float(sample.labels["max_num_seqs"])
            if sample.name == _INFO and all(sample.labels.get(k, "").isdigit() for k in _KV_LABELS):
                kv_tokens += float(sample.labels["num_gpu_blocks"]) * float(sample.labels["block_size"])
    load = {signal: next((found[n] for n in getattr(names, signal) if n in found), 0.0)
            for signal in ("waiting", "running", "kv_usage")}
    return {**load, "max_num_seqs": max_num_seqs, "kv_tokens": kv_tokens, "prefill_waiting": found.get(_BACKLOG, 0.0),
            "prefill_rate": found.get(_RATE, 0.0),
            "finished": next((found[n] for n in names.finished if n in found), 0.0)}


def listed_adapters(text: str) -> list[str]:
    """The adapters an engine's /v1/models body lists: its entries with a `parent` (the base model they adapt);
    none from a body of another shape."""
    try:
        data = json.loads(text).get("data")
    except (ValueError, AttributeError):
        return []
    return [m["id"] for m in data if isinstance(m, dict) and m.get("parent") and isinstance(m.get("id"), str)] \
        if isinstance(data, list) else []


async def get_text(session: aiohttp.ClientSession, url: str, timeout: aiohttp.ClientTimeout) -> tuple[int, str]:
    """(status, body text) of a GET."""
    async with session.get(url, timeout=timeout) as response:
        return response.status, await response.text(errors="replace")


@dataclass
class Backend:
    id: str
    url: str
    ready: bool = False
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    in_flight: int = 0
    in_flight_at_scrape: int = 0
    seen_running: float = 0.0  # the most requests ever seen running there
    max_num_seqs: float = 0.0  # the engine's batch capacity (vllm:cache_config_info); 0: not exported
    kv_tokens: float = 0.0  # its KV cache in tokens (the same metric's blocks x block size); 0: not exported
    prefill_waiting: float = 0.0  # scraped prompt tokens not yet prefilled (0 where the engine does not say)
    prefill_rate: float = 0.0  # scraped prompt tokens/s while decoding (0 where the engine does not say)
    pending_tokens: int = 0  # uncached prompt tokens of the gateway's requests there without a first byte yet
    recent_work: float = 0.0  # work sent there (routing.sent_work), decayed to recent_at (routing.decayed)
    recent_at: float = 0.0
    hold: SlotHold = SlotHold()  # how long its requests hold a batch slot, from its scrapes
    scraped_at: float | None = None
    misses: int = 0  # probes in a row that timed out

    @property
    def backlog(self) -> float:
        """Prompt tokens a request sent now waits behind: the scrape's or the gateway's own, whichever is more."""
        return max(self.prefill_waiting, float(self.pending_tokens))

    @property
    def requests_ahead(self) -> float:
        """Requests on the engine now, running or queued: the scrape's and those the gateway sent since, or the
        gateway's own in flight if more."""
        return max(self.running + self.waiting + self.in_flight - self.in_flight_at_scrape, float(self.in_flight))

    def admission_wait_s(self, prompt_tokens: int) -> float:
        """A request's wait there for a batch slot or KV cache (overflow.admission_wait_s; none where the engine
        exports no batch size or cache size: the most seen running is no bound to wait on)."""
        return admission_wait_s(self.hold.mean_s, self.requests_ahead, self.max_num_seqs, self.backlog, prompt_tokens,
                                self.kv_usage, self.kv_tokens)

    @property
    def capacity(self) -> float:
        """Requests the engine runs at once: as it says, else the most seen running (0: unknown)."""
        return self.max_num_seqs or self.seen_running

    def load(self, recent_work: float = 0.0) -> BackendLoad:
        return BackendLoad(self.id, self.ready, self.in_flight,
                           estimate_waiting(self.waiting, self.in_flight, self.in_flight_at_scrape, self.capacity),
                           self.running, self.kv_usage, self.backlog, recent_work)


@dataclass(frozen=True)
class PoolTotals:
    ready: int
    waiting: float
    running: float


@dataclass(frozen=True)
class BackendChoice:
    """Where routing would send a request (BackendTable.choose), before it is sent there."""

    backend: Backend
    uncached: int  # prompt tokens it likely has to prefill there (not in its prefix cache)
    recent_work: float  # the backend's recent work once it takes the request
    at: float  # when chosen


class BackendTable:
    def __init__(self, weights: RoutingWeights, rng: random.Random, runtime: Runtime = RUNTIMES[DEFAULT],
                 prefix: PrefixPolicy | None = None, clock=time.monotonic, max_loras: int = EngineConfig.max_loras):
        """prefix: the prefix-aware policy (None: load-only routing, adapters too); max_loras: the adapters each
        engine holds resident at once."""
        self.weights, self.rng, self.runtime, self.prefix, self.clock = weights, rng, runtime, prefix, clock
        self.backends: dict[str, Backend] = {}
        self.index = PrefixIndex()
        self.adapters = AdapterIndex(max_loras)

    def set_endpoints(self, endpoints: list[tuple[str, str]]) -> None:
        """Replaces the set of backends (id, url); known ones keep their state and in-flight counts."""
        current = {bid: self.backends.get(bid) or Backend(bid, url) for bid, url in endpoints}
        for bid, url in endpoints:
            current[bid].url = url
        self.backends = current
        self.index.retain(current)
        self.adapters.retain(current)

    def pick(self, exclude: frozenset[str], keys: list[int] = ()) -> Backend | None:
        return self.route(exclude, keys)[0]

    def choose(self, exclude: frozenset[str], keys: list[int] = (), prompt_tokens: int = 0,
               adapter: str | None = None) -> BackendChoice | None:
        """The backend for a request whose prompt has these prefix `keys` (prefix_index.request_keys) and about
        `prompt_tokens` tokens, for `adapter` (None: the base model), and how many of them it likely has to
        prefill (not in its cache); None when no backend is ready. Nothing is recorded before `take`: the
        overflow rule reads the choice first."""
        now, half_life = self.clock(), self.weights.recent_half_life_s
        loads = [b.load(decayed(b.recent_work, now - b.recent_at, half_life)) for b in self.backends.values()]
        hits: dict[str, float] = {}
        if self.prefix is None or not (keys or adapter):
            chosen = pick(loads, self.rng, self.weights, exclude)
        else:
            if keys:
                hits = {b.id: self.index.matched(b.id, keys) / len(keys) for b in loads if b.ready}
            chosen = pick_prefix(loads, hits, self.rng, self.weights, self.prefix, exclude, prompt_tokens,
                                 adapter_hits(adapter, self.adapters.holders()))
        if chosen is None:
            return None
        uncached = uncached_tokens(prompt_tokens, hits.get(chosen.id, 0.0))
        work = chosen.recent_work + sent_work(uncached, self.weights)
        return BackendChoice(self.backends[chosen.id], uncached, work, now)

    def take(self, choice: BackendChoice, keys: list[int] = (), adapter: str | None = None) -> None:
        """The request goes to the chosen backend: it holds the keys (and the adapter) from now on, and was sent
        those tokens."""
        if self.prefix is not None and keys:
            self.index.record(choice.backend.id, keys)
        if adapter is not None:
            self.adapters.sent(choice.backend.id, adapter)
        choice.backend.recent_work, choice.backend.recent_at = choice.recent_work, choice.at

    def route(self, exclude: frozenset[str], keys: list[int] = (),
              prompt_tokens: int = 0) -> tuple[Backend | None, int]:
        """choose, then take: the backend and the tokens it likely has to prefill."""
        choice = self.choose(exclude, keys, prompt_tokens)
        if choice is None:
            return None, 0
        self.take(choice, keys)
        return choice.backend, choice.uncached

    def totals(self, exclude: frozenset[str] = frozenset()) -> PoolTotals:
        ready = [b for b in self.backends.values() if b.ready and b.id not in exclude]
        loads = [b.load() for b in ready]
        return PoolTotals(len(loads), sum(b.waiting for b in loads), sum(b.running for b in loads))

    def mark_unready(self, backend_id: str) -> None:
        """A failed request takes the backend out of rotation until its next good probe."""
        if backend_id in self.backends:
            self.backends[backend_id].ready = False
            self.index.drop(backend_id)
            self.adapters.forget(backend_id)

    async def refresh(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        await asyncio.gather(*(self._probe(session, b, timeout_s) for b in list(self.backends.values())))

    async def _probe(self, session: aiohttp.ClientSession, b: Backend, timeout_s: float) -> None:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            (ready, _), (status, text) = await asyncio.gather(
                get_text(session, b.url + self.runtime.ready_path, timeout),
                get_text(session, b.url + "/metrics", timeout))
            load = parse_engine_load(text, self.runtime.metrics) if status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            b.misses = b.misses + 1 if isinstance(e, asyncio.TimeoutError) else MISSES_UNREADY
            if b.ready and b.misses < MISSES_UNREADY:
                log.info("backend %s probe timed out (%d in a row): kept in rotation", b.id, b.misses)
                return
            if b.ready:
                log.warning("backend %s unready: %s", b.id, type(e).__name__)
            b.ready = False
            self.index.drop(b.id)
            self.adapters.forget(b.id)
            return
        b.misses = 0
        if b.ready != (ready == 200):
            log.info("backend %s %s", b.id, "ready" if ready == 200 else f"unready ({ready})")
            if ready == 200:
                await self._read_adapters(session, b, timeout)
        b.ready = ready == 200
        if not b.ready:  # draining, restarting or still loading: whatever it cached or held is gone or going
            self.index.drop(b.id)
            self.adapters.forget(b.id)
        if load is not None:
            b.waiting, b.running, b.kv_usage = load["waiting"], load["running"], load["kv_usage"]
            b.in_flight_at_scrape, b.seen_running = b.in_flight, max(b.seen_running, b.running)
            b.max_num_seqs, b.kv_tokens, b.prefill_waiting, b.prefill_rate = \
                load["max_num_seqs"], load["kv_tokens"], load["prefill_waiting"], load["prefill_rate"]
            if load["kv_tokens"]:
                self.index.set_capacity(b.id, int(load["kv_tokens"]) // BLOCK_TOKENS)
            now = self.clock()
            b.hold = slot_hold_update(b.hold, b.running, load["finished"], now - (b.scraped_at or now))
            b.scraped_at = now

    async def _read_adapters(self, session: aiohttp.ClientSession, b: Backend, timeout: aiohttp.ClientTimeout) -> None:
        """What a backend turning ready serves from startup (its /v1/models); unread, the gateway learns its
        adapters only from what it routes there."""
        try:
            status, text = await get_text(session, b.url + "/v1/models", timeout)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            log.warning("backend %s: /v1/models unread: %s", b.id, type(e).__name__)
            return
        self.adapters.listed(b.id, listed_adapters(text) if status == 200 else [])

    def snapshot(self) -> list[dict]:
        return [{"id": b.id, "url": b.url, "ready": b.ready, "in_flight": b.in_flight, "waiting": b.waiting,
                 "estimated_waiting": b.load().waiting, "running": b.running, "kv_usage": b.kv_usage,
                 "prefill_tokens_per_s": b.prefill_rate, "prefix_blocks": self.index.size(b.id),
                 "adapters": sorted(self.adapters.holders().get(b.id, ())),
                 "mean_slot_hold_s": b.hold.mean_s, "admission_wait_s": b.admission_wait_s(0)}
                for b in self.backends.values()]
