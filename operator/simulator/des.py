"""The discrete-event simulation of one InferenceService: gateway (the real routing and overflow rule), replicas
with cold starts, and an autoscaler ticking on its interval. Deterministic: the one draw after the trace, the
routing's power-of-two choices, comes from a seeded generator.

The autoscaler sees what it sees in production: each replica keeps the counters and histograms an engine
exports (TTFT and per-request TPOT with the engine's buckets, finished requests, prompt tokens), the gateway
its request and overflow counters, and each tick builds the same Scrape objects the operator builds and
derives its Signals through the same `signals_between` (window: the time since the previous tick).

Overflowed requests are served by the external API with a fixed TTFT and TPOT (SimConfig), and count
toward SLO attainment with those latencies. The gateway chooses a replica as the real one does (routing.pick on
the load score), predicts the request's TTFT there and sends it there if it stays local. With `SimConfig.prefix`
set, replicas model their prefix cache (replica.py) on traces that carry block ids, and the gateway routes on load
only ("load") or with the real prefix-aware pick ("prefix": routing.pick_prefix, each replica's cached share of the
request's blocks).
Replica-hours count a replica from its start (cold start
included) to the end of its drain, up to the last arrival of the trace.
"""

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from floodway.engine.server.metrics import ITL_BUCKETS, TTFT_BUCKETS
from floodway.operator.autoscaler.policy import ScalerState
from floodway.operator.autoscaler.signals import EngineSample, GatewaySample, Scrape, Signals, signals_between
from floodway.operator.controller.scaling import instant_signals
from floodway.operator.gateway import overflow as ov
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
from floodway.operator.simulator.replica import Replica, ReplicaProfile, SimRequest
from floodway.operator.simulator.traces import Request


@dataclass(frozen=True)
class SimConfig:
    profile: ReplicaProfile = field(default_factory=ReplicaProfile)
    cold_start_s: float = 120.0
    ttft_slo_s: float = 0.5
    tpot_slo_s: float = 0.05
    overflow: ov.OverflowPolicy = field(default_factory=ov.OverflowPolicy)  # enabled=False: no overflow
    external_ttft_s: float = 0.4
    external_tpot_s: float = 0.03
    sample_s: float = 10.0
    # The gateway's PoolState.waiting: engines' waiting queues only (as scraped), or also the requests still in
    # prefill (the gateway knows its own requests without a first byte): those delay TTFT just as much.
    waiting_includes_prefill: bool = False
    # The gateway's predicted TTFT: from the prefill tokens ahead of the request on the replica it would pick
    # (as the gateway does: engines export floodway_num_prefill_tokens_waiting), or from waiting counts and
    # an end-to-end latency average (the former gateway's rule, for comparison).
    ttft_from_prefill_backlog: bool = True
    # With it, the rate that backlog is divided by: the one each replica exports from its step times (our engine's
    # floodway_prefill_tokens_per_second), or, as the gateway does for runtimes that export none (vLLM), the
    # prompt tokens/s earlier answers showed up to their first token (EWMA 0.2). The gateway learns the latter
    # either way: it stands in for a replica that has timed no prefill yet.
    learned_prefill_rate: bool = False
    # TPOT protection in the replicas (the engine's --tpot-slo-ms at the TPOT SLO, as the operator renders it).
    prefill_budget: bool = True
    # Prefix caching in the replicas and the gateway's router: None (not modelled), "load" or "prefix".
    prefix: str | None = None
    prefix_policy: PrefixPolicy = field(default_factory=PrefixPolicy)


@dataclass(frozen=True)
class Scaler:
    """A policy to simulate: decide(state, signals, policy, now) -> Decision, its policy and start size."""

    name: str
    decide: Callable
    policy: Any
    initial_replicas: int


@dataclass
class Slot:
    started_s: float
    replica: Replica | None = None  # set when ready
    ended_s: float | None = None
    draining: bool = False
    last_busy_s: float = 0.0  # replica busy time and clock at the last tick, for utilisation
    util_since: float = 0.0
    # What its engine exports: cumulative histograms {upper bound: count}, finished requests, prompt tokens.
    ttft: dict = field(default_factory=lambda: dict.fromkeys((*TTFT_BUCKETS, math.inf), 0))
    tpot: dict = field(default_factory=lambda: dict.fromkeys((*ITL_BUCKETS, math.inf), 0))
    finished: int = 0
    prompt_tokens: int = 0
    recent_work: float = 0.0  # the gateway's work sent here (routing.sent_work), decayed to recent_at
    recent_at: float = 0.0
    hold: ov.SlotHold = ov.SlotHold()  # the gateway's estimate of how long requests hold a batch slot here
    hold_at: float = 0.0

    def observe(self, r: SimRequest) -> None:
        _observe(self.ttft, r.first_token_s - r.arrival_s)
        if r.output > 1:
            _observe(self.tpot, (r.finish_s - r.first_token_s) / (r.output - 1))
        self.finished += 1

    def sample(self) -> EngineSample:
        rep = self.replica
        return EngineSample(rep.running, rep.waiting, rep.kv_usage, dict(self.ttft), dict(self.tpot), True,
                            self.finished, self.prompt_tokens)


@dataclass(frozen=True)
class Choice:
    """Where the simulated gateway would send a request (the gateway's backends.Choice, on a replica slot)."""

    slot: Slot
    uncached: int  # prompt tokens it likely has to prefill there
    recent_work: float  # the slot's recent work once it takes the request


def _observe(hist: dict, value: float) -> None:
    for le in hist:
        if value <= le:
            hist[le] += 1


@dataclass
class SimResult:
    name: str
    requests: list[SimRequest]
    timeline: list[dict]
    replica_hours: float
    scale_events: int
    duration_s: float
    config: SimConfig
    reasons: list[tuple[float, int, str]] = field(default_factory=list)
    prefix: list[tuple[int, int]] = field(default_factory=list)  # per replica: prefix-cache (hit, looked-up) tokens


class Simulation:
    def __init__(self, trace: list[Request], scaler: Scaler, config: SimConfig):
        if not trace:
            raise ValueError("empty trace")
        self.cfg, self.scaler = config, scaler
        if config.prefix not in (None, "load", "prefix"):
            raise ValueError(f"prefix must be None, 'load' or 'prefix', got {config.prefix!r}")
        self.reqs = [SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens, r.blocks) for r in trace]
        self.rng = random.Random(0)  # the routing's power-of-two choices and ties
        self.end = self.reqs[-1].arrival_s
        self.slots: list[Slot] = []
        self.events: list = []
        self._seq = 0
        self.held: deque[SimRequest] = deque()
        self.budget = ov.BudgetState()
        self.state = ScalerState(replicas=scaler.initial_replicas)
        self.e2e_ewma = None
        self.prefill_rate: float | None = None  # the gateway's learned rate, from its answers so far
        self._unsampled: list[tuple[SimRequest, float, float, int]] = []  # (request, backlog, sent at, uncached)
        self.gw_requests = self.gw_overflow = 0  # the gateway's counters
        self.last_scrape: Scrape | None = None
        self.timeline: list[dict] = []
        self.reasons: list[tuple[float, int, str]] = []
        self.scale_events = 0
        self._sample_arrivals = self._sample_overflow = 0
        for _ in range(scaler.initial_replicas):
            self._ready(self._new_slot(0.0), 0.0)

    # -- bookkeeping -------------------------------------------------------------------------------
    def _push(self, t: float, kind: str, data=None) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, data))

    def _new_slot(self, t: float) -> Slot:
        slot = Slot(t)
        self.slots.append(slot)
        return slot

    def _on_finish(self, r: SimRequest, slot: Slot) -> None:
        slot.observe(r)
        a = 0.2  # the gateway's EWMA weight (proxy.py), for the former TTFT prediction
        e2e = r.finish_s - r.arrival_s
        self.e2e_ewma = e2e if self.e2e_ewma is None else (1 - a) * self.e2e_ewma + a * e2e

    def _active(self) -> list[Slot]:
        return [s for s in self.slots if s.replica is not None and s.ended_s is None]

    def _routable(self) -> list[Slot]:
        return [s for s in self._active() if not s.draining]

    def _advance(self, t: float) -> None:
        for s in self._active():
            s.replica.advance_to(t)
            if s.draining and not s.replica.busy:
                s.ended_s = max(t, s.replica.now)

    # -- gateway -------------------------------------------------------------------------------------
    def _choose(self, r: SimRequest, t: float) -> Choice | None:
        """The gateway's choice (BackendTable.choose): power-of-two choices on the load score, prefix-aware when
        configured; nothing recorded until `_dispatch` sends the request there, as the overflow rule reads the choice
        first. None: no replica ready."""
        ready, weights = self._routable(), RoutingWeights()
        if not ready:
            return None
        recent = [decayed(s.recent_work, t - s.recent_at, weights.recent_half_life_s) for s in ready]
        loads = [BackendLoad(str(i), True, 0, s.replica.waiting, s.replica.running, s.replica.kv_usage,
                             s.replica.backlog, recent[i]) for i, s in enumerate(ready)]
        if self.cfg.prefix == "prefix" and r.blocks:
            hits = {str(i): s.replica.cached_blocks(r.blocks) / len(r.blocks) for i, s in enumerate(ready)}
            chosen = pick_prefix(loads, hits, self.rng, weights, self.cfg.prefix_policy, prompt_tokens=r.prompt)
            uncached = uncached_tokens(r.prompt, hits[chosen.id])
        else:
            chosen, uncached = pick(loads, self.rng, weights), r.prompt
        return Choice(ready[int(chosen.id)], uncached, chosen.recent_work + sent_work(uncached, weights))

    def _learn_prefill_rate(self, t: float) -> None:
        """The real gateway's rate samples (overflow.prefill_rate_sample) of the first tokens seen by `t`, in the
        order they came."""
        seen = [x for x in self._unsampled if x[0].first_token_s is not None and x[0].first_token_s <= t]
        if not seen:
            return
        self._unsampled = [x for x in self._unsampled if x[0].first_token_s is None or x[0].first_token_s > t]
        for req, backlog, sent, uncached in sorted(seen, key=lambda x: x[0].first_token_s):
            sample = ov.prefill_rate_sample(backlog, uncached, req.first_token_s - sent)
            self.prefill_rate = ov.learned_prefill_rate(self.prefill_rate, sample)

    def _pool(self, choice: Choice | None, t: float) -> ov.PoolState:
        ready = self._routable()
        n = len(ready)
        waiting = sum(s.replica.waiting for s in ready)
        if self.cfg.waiting_includes_prefill:
            waiting += sum(len(s.replica.prefilling) for s in ready)
        running = sum(s.replica.running for s in ready)
        pred = None
        if choice and self.cfg.ttft_from_prefill_backlog:
            self._learn_prefill_rate(t)
            slot, rep = choice.slot, choice.slot.replica
            slot.hold, slot.hold_at = ov.slot_hold_update(slot.hold, rep.running, slot.finished, t - slot.hold_at), t
            engine_rate = None if self.cfg.learned_prefill_rate else rep.prefill_rate
            wait = ov.admission_wait_s(slot.hold.mean_s, rep.running + rep.waiting, rep.p.max_num_seqs, rep.backlog,
                                       choice.uncached, rep.kv_usage, rep.p.kv_capacity_tokens)
            pred = ov.predict_ttft_from_backlog(rep.backlog, choice.uncached, engine_rate, self.prefill_rate, wait)
        elif choice:
            # The request's own prefill time stands in for the gateway's base TTFT estimate.
            base = choice.uncached / self.cfg.profile.prefill_tokens_per_s
            pred = ov.predict_ttft_s(waiting / n, running / n, self.e2e_ewma, base)
        return ov.PoolState(ready=n, waiting=waiting, predicted_ttft_s=pred, held=len(self.held), budget=self.budget)

    def _dispatch(self, r: SimRequest, t: float, held: bool) -> bool:
        """Route one request by the gateway's overflow rule; False when it stays held."""
        pol = self.cfg.overflow
        info = ov.RequestInfo(tokens=r.prompt + r.output, arrived_at=r.arrival_s, held=held)
        choice = self._choose(r, t)
        d = ov.overflow_decision(self._pool(choice, t), pol, info, t)
        if d.target == "local":
            best = choice.slot
            best.recent_work, best.recent_at = choice.recent_work, t
            r.where = "local"
            if not best.replica.fits(r):
                r.where = "rejected"
                return True
            backlog = best.replica.backlog
            best.replica.submit(r, t)
            if self.cfg.ttft_from_prefill_backlog:  # r.left: what its prefix cache leaves, as the gateway expects
                self._unsampled.append((r, backlog, t, r.left))
            best.prompt_tokens += r.prompt
        elif d.target == "overflow":
            self.budget = ov.budget_take(self.budget, pol.budget, info.tokens, t)
            r.where, r.first_token_s = "overflow", t + self.cfg.external_ttft_s
            r.finish_s = r.first_token_s + max(r.output - 1, 0) * self.cfg.external_tpot_s
            self._sample_overflow += 1
            self.gw_overflow += 1
        elif d.target == "reject":
            r.where = "rejected"
        else:
            return False
        return True

    def _drain_held(self, t: float) -> None:
        keep = deque()
        while self.held:
            r = self.held.popleft()
            if not self._dispatch(r, t, held=True):
                keep.append(r)
        self.held = keep
        if self.held:
            self._push(t + 1.0, "hold")

    def _arrive(self, r: SimRequest) -> None:
        t = r.arrival_s
        self._advance(t)
        self._sample_arrivals += 1
        self.gw_requests += 1
        if not self._dispatch(r, t, held=False):
            if not self.held:
                self._push(t + 1.0, "hold")
            self.held.append(r)

    # -- replicas and the autoscaler -------------------------------------------------------------------
    def _ready(self, slot: Slot, t: float) -> None:
        slo = self.cfg.tpot_slo_s if self.cfg.prefill_budget else None
        slot.replica = Replica(self.cfg.profile, t, lambda r: self._on_finish(r, slot), slo,
                               prefix_cache=self.cfg.prefix is not None)
        slot.util_since = t

    def _reconcile(self, desired: int, t: float) -> None:
        starting = [s for s in self.slots if s.replica is None and s.ended_s is None]
        ready = self._routable()
        have = len(starting) + len(ready)
        for _ in range(desired - have):
            self._push(t + self.cfg.cold_start_s, "ready", self._new_slot(t))
        excess = have - desired
        for s in reversed(starting):  # cancel the newest cold starts first
            if excess <= 0:
                break
            s.ended_s, excess = t, excess - 1
        for s in sorted(ready, key=lambda s: s.replica.running + s.replica.waiting)[:max(excess, 0)]:
            s.draining = True
            if not s.replica.busy:
                s.ended_s = t

    def _signals(self, t: float) -> Signals:
        """What the operator derives from its scrapes (engines' and the gateway's /metrics) at this tick; the
        busy share of each replica stands for the GPU utilisation HPA reads from its own exporter."""
        ready = self._routable()
        scrape = Scrape(t, {str(id(s)): s.sample() for s in ready},
                        GatewaySample(self.gw_requests, self.gw_overflow, len(self.held)),
                        sum(1 for s in self.slots if s.replica is None and s.ended_s is None))
        last, self.last_scrape = self.last_scrape, scrape
        sig = signals_between(last, scrape, self.cfg.ttft_slo_s, self.cfg.tpot_slo_s) \
            if last is not None and t > last.time else instant_signals(scrape)
        util = tuple(min(1.0, (s.replica.busy_s - s.last_busy_s) / (t - s.util_since)) if t > s.util_since else 0.0
                     for s in ready)
        return replace(sig, utilization=util)

    def _tick(self, t: float) -> None:
        self._advance(t)
        sig = self._signals(t)
        for s in self._routable():
            s.last_busy_s, s.util_since = s.replica.busy_s, t
        d = self.scaler.decide(self.state, sig, self.scaler.policy, t)
        if d.replicas != self.state.replicas:
            self.scale_events += 1
            self.reasons.append((t, d.replicas, d.reason))
        self.state = d.state
        self._reconcile(d.replicas, t)
        if self.held and self._routable():
            self._drain_held(t)

    def _sample(self, t: float) -> None:
        self._advance(t)
        ready = self._routable()
        dt = self.cfg.sample_s
        self.timeline.append({
            "t": t, "arrival_rate": self._sample_arrivals / dt, "overflow_rate": self._sample_overflow / dt,
            "desired": self.state.replicas, "ready": len(ready),
            "queue": sum(s.replica.waiting for s in ready) + len(self.held),
            "running": sum(s.replica.running for s in ready),
        })
        self._sample_arrivals = self._sample_overflow = 0

    # -- main loop -------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        self._push(0.0, "tick")
        self._push(self.cfg.sample_s, "sample")
        i, n = 0, len(self.reqs)
        while i < n or self.events:
            t_arr = self.reqs[i].arrival_s if i < n else math.inf
            if self.events and self.events[0][0] <= t_arr:
                t, _, kind, data = heapq.heappop(self.events)
                if t > self.end and kind in ("tick", "sample"):
                    continue
                if kind == "tick":
                    self._tick(t)
                    self._push(t + self.scaler.policy.interval_s, "tick")
                elif kind == "sample":
                    self._sample(t)
                    self._push(t + self.cfg.sample_s, "sample")
                elif kind == "ready" and data.ended_s is None:
                    self._advance(t)
                    self._ready(data, t)
                    self._drain_held(t)
                elif kind == "hold" and self.held:
                    self._advance(t)
                    self._drain_held(t)
            else:
                self._arrive(self.reqs[i])
                i += 1
        self._finish_all()
        hours = sum(min(s.ended_s if s.ended_s is not None else self.end, self.end) - min(s.started_s, self.end)
                    for s in self.slots) / 3600.0
        prefix = [(s.replica.prefix_hits, s.replica.prefix_queries) for s in self.slots if s.replica is not None]
        return SimResult(self.scaler.name, self.reqs, self.timeline, hours, self.scale_events, self.end, self.cfg,
                         self.reasons, prefix)

    def _finish_all(self) -> None:
        for r in self.held:
            r.where = "rejected"
        for s in self._active():
            while s.replica.busy:
                s.replica.advance_to(s.replica.now + 3600.0)


def simulate(trace: list[Request], scaler: Scaler, config: SimConfig | None = None) -> SimResult:
    return Simulation(trace, scaler, config or SimConfig()).run()
