"""The discrete-event simulation of one InferenceService: its gateway (gateway.py: the real routing and overflow
rule), replicas with cold starts, and an autoscaler ticking on its interval. Deterministic: the one draw after the
trace, the routing's power-of-two choices, comes from a seeded generator.

The autoscaler sees what it sees in production: each replica keeps the counters and histograms an engine
exports (TTFT and per-request TPOT with the engine's buckets, finished requests, prompt tokens), the gateway
its request and overflow counters, and each tick builds the same Scrape objects the operator builds and
derives its Signals through the same `signals_between` (window: the time since the previous tick); our policy's
ticks also keep the service's history and read its forecast through the operator's `forecast.foresee`.

Overflowed requests are served by the external API with a fixed TTFT and TPOT (SimConfig), and count
toward SLO attainment with those latencies. With `SimConfig.prefix` set, replicas model their prefix cache
(replica.py) on traces that carry block ids, and the gateway routes on load only ("load") or with the real
prefix-aware pick ("prefix": routing.pick_prefix, each replica's cached share of the request's blocks).
Replica-hours count a replica from its start (cold start included) to the end of its drain, up to the last
arrival of the trace.
"""

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from floodway.operator.autoscaler.forecast import foresee
from floodway.operator.autoscaler.history import DAY_S, History
from floodway.operator.autoscaler.policy import ScalerState
from floodway.operator.autoscaler.signals import Scrape, Signals, signals_between
from floodway.operator.controller.scaling import instant_signals
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.gateway import SimGateway
from floodway.operator.simulator.replica import Replica, SimRequest
from floodway.operator.simulator.slot import ReplicaSlot
from floodway.operator.simulator.traces import TraceRequest


@dataclass(frozen=True)
class Scaler:
    """A policy to simulate: decide(state, signals, policy, now) -> ScaleDecision, its policy and start size."""

    name: str
    decide: Callable
    policy: Any
    initial_replicas: int


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
    def __init__(self, trace: list[TraceRequest], scaler: Scaler, config: SimConfig):
        if not trace:
            raise ValueError("empty trace")
        self.cfg, self.scaler = config, scaler
        if config.prefix not in (None, "load", "prefix"):
            raise ValueError(f"prefix must be None, 'load' or 'prefix', got {config.prefix!r}")
        self.reqs = [SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens, r.blocks, r.adapter, r.tenant, r.klass)
                     for r in trace]
        self.end = self.reqs[-1].arrival_s
        self.slots: list[ReplicaSlot] = []
        self.events: list = []
        self._seq = 0
        self.gateway = SimGateway(config)
        self.state = ScalerState(replicas=scaler.initial_replicas)
        self.history = History(getattr(scaler.policy, "day_s", DAY_S))  # the service's traffic, as the operator has it
        self.last_scrape: Scrape | None = None
        self.timeline: list[dict] = []
        self.reasons: list[tuple[float, int, str]] = []
        self.scale_events = 0
        self._sampled = (0, 0)  # the gateway's counters (requests, overflowed) at the timeline's last sample
        for _ in range(scaler.initial_replicas):
            self._ready(self._new_slot(0.0), 0.0)

    # -- bookkeeping -------------------------------------------------------------------------------
    def _push(self, t: float, kind: str, data=None) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, data))

    def _new_slot(self, t: float) -> ReplicaSlot:
        slot = ReplicaSlot(t, name=str(len(self.slots)))
        self.slots.append(slot)
        return slot

    def _on_finish(self, r: SimRequest, slot: ReplicaSlot) -> None:
        slot.observe(r)
        self.gateway.on_finish(r)

    def _active(self) -> list[ReplicaSlot]:
        return [s for s in self.slots if s.replica is not None and s.ended_s is None]

    def _routable(self) -> list[ReplicaSlot]:
        return [s for s in self._active() if not s.draining]

    def _advance(self, t: float) -> None:
        for s in self._active():
            s.replica.advance_to(t)
            if s.draining and not s.replica.busy:
                s.ended_s = max(t, s.replica.now)

    def _drain_held(self, t: float) -> None:
        if self.gateway.drain(self._routable(), t):
            self._push(t + 1.0, "hold")

    def _arrive(self, r: SimRequest) -> None:
        t = r.arrival_s
        self._advance(t)
        if self.gateway.arrive(self._routable(), r, t):
            self._push(t + 1.0, "hold")

    # -- replicas and the autoscaler -------------------------------------------------------------------
    def _ready(self, slot: ReplicaSlot, t: float) -> None:
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
        scrape = Scrape(t, {str(id(s)): s.sample() for s in ready}, self.gateway.sample(t),
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
        lead = getattr(self.scaler.policy, "forecast_lead_seconds", 0.0)  # ours only: the baselines have no history
        if lead:
            sig = foresee(self.history, sig, t, lead)
        d = self.scaler.decide(self.state, sig, self.scaler.policy, t)
        if d.replicas != self.state.replicas:
            self.scale_events += 1
            self.reasons.append((t, d.replicas, d.reason))
        self.state = d.state
        self._reconcile(d.replicas, t)
        if self.gateway.held and self._routable():
            self._drain_held(t)

    def _sample(self, t: float) -> None:
        self._advance(t)
        ready = self._routable()
        dt, gw, (requests, overflowed) = self.cfg.sample_s, self.gateway, self._sampled
        self.timeline.append({
            "t": t, "arrival_rate": (gw.requests - requests) / dt, "overflow_rate": (gw.overflowed - overflowed) / dt,
            "desired": self.state.replicas, "ready": len(ready),
            "queue": sum(s.replica.waiting for s in ready) + len(gw.held),
            "running": sum(s.replica.running for s in ready),
        })
        self._sampled = (gw.requests, gw.overflowed)

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
                    self._push(t + self.scaler.policy.interval_seconds, "tick")
                elif kind == "sample":
                    self._sample(t)
                    self._push(t + self.cfg.sample_s, "sample")
                elif kind == "ready" and data.ended_s is None:
                    self._advance(t)
                    self._ready(data, t)
                    self._drain_held(t)
                elif kind == "hold" and self.gateway.held:
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
        for r, _ in self.gateway.held:
            r.where = "rejected"
        for s in self._active():
            while s.replica.busy:
                s.replica.advance_to(s.replica.now + 3600.0)


def simulate(trace: list[TraceRequest], scaler: Scaler, config: SimConfig | None = None) -> SimResult:
    return Simulation(trace, scaler, config or SimConfig()).run()
