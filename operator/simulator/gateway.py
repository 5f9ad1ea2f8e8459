"""The simulated gateway of des.py: it routes, predicts and overflows with the real gateway's functions.

For each request it chooses a ready replica as BackendTable.choose does (routing.pick: power-of-two choices on the
load score, from a seeded generator; routing.pick_prefix with `SimConfig.prefix` "prefix", and for a request naming a
LoRA adapter, unless routing is on "load" only, with the replicas holding it as adapters.AdapterIndex tracks them
from what was sent where), predicts the request's
TTFT there (the prefill backlog over the rate the replica exports, or over the rate earlier answers showed, plus the
wait for a batch slot or KV cache) and applies the real overflow rule (an adapter without a SimConfig.overflow_models
entry never overflows: adapters.never_overflows): the request goes to that replica, to the
external API (answered with SimConfig's fixed TTFT and TPOT), into the hold queue (retried each second) or is
rejected; with a share limit (autoscaling.priority budget) it counts each request against the share as it arrives,
as the gateway does. With tenants (SimConfig.tenants) a request is first admitted by its tenant's limits
(tenants.admit; refused: `where` "refused", never sent on) and its tenant's overflow cap applies; its class
(classes.request_class, SimConfig.classes) sets its overflow rule, TTFT SLO and queue limit (classes.classed). The
hold queue releases in arrival order (the gateway's fair share between tenants, fair_share.py, is not modelled).
It keeps the counters the operator scrapes from a gateway (`sample`), those by class included: its requests in
flight, and its answers' TTFT and TPOT (the mean time per output token after the first, for answers of two tokens or
more: SimRequest.tpot_s) against the class's SLOs, both counted when the answer ends (the gateway counts
TTFT at the first token).
"""

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace
from random import Random

from floodway.operator.autoscaler.signals import ClassCounts, GatewaySample, observe
from floodway.operator.gateway import overflow as ov
from floodway.operator.gateway import overflow_budget as ob
from floodway.operator.gateway import tenants as tn
from floodway.operator.gateway import ttft as tt
from floodway.operator.gateway.adapters import AdapterIndex, adapter_hits, never_overflows
from floodway.operator.gateway.classes import classed, request_class
from floodway.operator.gateway.routing import (
    BackendLoad,
    RoutingWeights,
    decayed,
    pick,
    pick_prefix,
    sent_work,
    uncached_tokens,
)
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.replica import SimRequest
from floodway.operator.simulator.slot import ReplicaSlot


@dataclass(frozen=True)
class SlotChoice:
    """Where the gateway would send a request (the gateway's backends.BackendChoice, on a replica slot)."""

    slot: ReplicaSlot
    uncached: int  # prompt tokens it likely has to prefill there
    recent_work: float  # the slot's recent work once it takes the request


class SimGateway:
    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.rng = Random(0)  # the routing's power-of-two choices and ties
        self.held: deque[tuple[SimRequest, ov.RequestInfo]] = deque()  # with its info as it arrived
        self.budget = ob.BudgetState()
        self.e2e_ewma: float | None = None
        self.prefill_rate: float | None = None  # the learned rate, from its answers so far
        self._unsampled: list[tuple[SimRequest, float, float, int]] = []  # (request, backlog, sent at, uncached)
        self.requests = self.overflowed = 0  # its counters, as scraped
        self.tokens = self.overflowed_tokens = self.declined = 0
        self.needed = dict.fromkeys((*ov.REPLICAS_NEEDED_BUCKETS, math.inf), 0)  # floodway_gateway_replicas_needed
        self.adapters = AdapterIndex(cfg.max_loras)  # by slot name
        self.tenants: dict[str, tn.TenantState] = {}  # each tenant's counters (tenant_gate.TenantGate's)
        self._limits = cfg.tenants.limits_by_name()
        self._overflow_ends: list[tuple[float, int, SimRequest]] = []  # (finish, seq, request): over then
        self.class_in_flight: dict[str, int] = {}
        self.class_slo: dict[str, ClassCounts] = {}  # its answers' TTFT and TPOT against their class's SLOs

    def _limits_of(self, tenant: str):
        return self._limits.get(tenant, self.cfg.tenants.default)

    def _release(self, r: SimRequest) -> None:
        """It is over (the answer ended, or it was rejected): its tenant's concurrency slot frees, its class's count
        in flight drops, and an answer's TTFT and TPOT count for its class."""
        if r.tenant in self.tenants:
            self.tenants[r.tenant] = tn.released(self.tenants[r.tenant])
        if r.klass is None or r.klass not in self.class_in_flight:
            return
        self.class_in_flight[r.klass] -= 1
        if r.where in ("local", "overflow") and r.first_token_s is not None:
            ttft_met = r.ttft_s <= self.cfg.ttft_slo_of(r.klass)
            tpot_met = None if r.tpot_s is None else r.tpot_s <= self.cfg.tpot_slo_of(r.klass)
            self.class_slo[r.klass] = self.class_slo.get(r.klass, ClassCounts()) + ClassCounts.answer(ttft_met,
                                                                                                      tpot_met)

    def _overflows_over(self, t: float) -> None:
        while self._overflow_ends and self._overflow_ends[0][0] <= t:
            self._release(heapq.heappop(self._overflow_ends)[2])

    def _admit(self, r: SimRequest, t: float) -> ov.RequestInfo | None:
        """What the gateway knows of a new request, as its handler builds it (class, then tenant admission); None:
        refused by its class or its tenant's limits."""
        tokens = r.prompt + r.output
        info = ov.RequestInfo(tokens=tokens, arrived_at=r.arrival_s,
                              unmapped_model=never_overflows(r.adapter, self.cfg.overflow_models))
        tenanted = r.tenant is not None and self.cfg.tenants.enabled()
        if self.cfg.classes:
            default = self._limits_of(r.tenant).default_class if tenanted else None
            pick = request_class(self.cfg.classes, default, r.klass or "")
            if pick.error is not None:
                return None
            r.klass = pick.chosen.name if pick.chosen is not None else None  # its class, as the gateway counts it
            if self.cfg.engine_priority and pick.chosen is not None:
                r.priority = pick.chosen.priority
            info = classed(info, pick.chosen) if pick.chosen is not None else info
        if not tenanted:
            return info
        limits = self._limits_of(r.tenant)
        a = tn.admit(self.tenants.get(r.tenant, tn.TenantState()), limits, tokens, t)
        self.tenants[r.tenant] = a.state
        if a.refused is not None:
            return None
        capped = self.cfg.overflow.enabled and not tn.overflow_allows(a.state, limits, tokens, t)
        return replace(info, tenant_capped=capped)

    def on_finish(self, r: SimRequest) -> None:
        self._release(r)
        a = 0.2  # the gateway's EWMA weight (proxy.py), for the former TTFT prediction
        e2e = r.finish_s - r.arrival_s
        self.e2e_ewma = e2e if self.e2e_ewma is None else (1 - a) * self.e2e_ewma + a * e2e

    def sample(self, t: float) -> GatewaySample:
        """What the operator scrapes from the gateway at `t`."""
        self._overflows_over(t)
        return GatewaySample(self.requests, self.overflowed, len(self.held), dict(self.needed), self.tokens,
                             self.overflowed_tokens, self.declined, dict(self.class_in_flight), dict(self.class_slo))

    def arrive(self, ready: list[ReplicaSlot], r: SimRequest, t: float) -> bool:
        """Route a new request; True when it is the first one held (the caller's cue to retry in a second)."""
        self._overflows_over(t)
        info = self._admit(r, t)
        if info is None:
            r.where = "refused"
            return False
        if r.klass is not None:
            self.class_in_flight[r.klass] = self.class_in_flight.get(r.klass, 0) + 1
        self.requests += 1
        self.tokens += r.prompt + r.output
        self.budget = ob.budget_arrive(self.budget, self.cfg.overflow.budget, r.prompt + r.output, t)
        if self._dispatch(ready, r, info, t):
            return False
        self.held.append((r, info))
        return len(self.held) == 1

    def drain(self, ready: list[ReplicaSlot], t: float) -> bool:
        """Retry the held requests in order; True while some stay held."""
        keep = deque()
        while self.held:
            r, info = self.held.popleft()
            if not self._dispatch(ready, r, replace(info, held=True), t):
                keep.append((r, info))
        self.held = keep
        return bool(self.held)

    def _choose(self, ready: list[ReplicaSlot], r: SimRequest, t: float) -> SlotChoice | None:
        """The gateway's choice (BackendTable.choose); nothing recorded until `_dispatch` sends the request there,
        as the overflow rule reads the choice first. None: no replica ready."""
        weights = RoutingWeights()
        if not ready:
            return None
        recent = [decayed(s.recent_work, t - s.recent_at, weights.recent_half_life_s) for s in ready]
        loads = [BackendLoad(str(i), True, 0, s.replica.waiting, s.replica.running, s.replica.kv_usage,
                             s.replica.backlog, recent[i]) for i, s in enumerate(ready)]
        hits = {str(i): s.replica.cached_blocks(r.blocks) / len(r.blocks) for i, s in enumerate(ready)} \
            if self.cfg.prefix == "prefix" and r.blocks else {}
        holders = self.adapters.holders() if self.cfg.prefix != "load" else {}
        resident = adapter_hits(r.adapter, {str(i): holders.get(s.name, ()) for i, s in enumerate(ready)})
        if hits or resident:
            chosen = pick_prefix(loads, hits, self.rng, weights, self.cfg.prefix_policy, prompt_tokens=r.prompt,
                                 resident=resident)
            uncached = uncached_tokens(r.prompt, hits.get(chosen.id, 0.0))
        else:
            chosen, uncached = pick(loads, self.rng, weights), r.prompt
        return SlotChoice(ready[int(chosen.id)], uncached, chosen.recent_work + sent_work(uncached, weights))

    def _learn_prefill_rate(self, t: float) -> None:
        """The real gateway's rate samples (overflow.prefill_rate_sample) of the first tokens seen by `t`, in the
        order they came."""
        seen = [x for x in self._unsampled if x[0].first_token_s is not None and x[0].first_token_s <= t]
        if not seen:
            return
        self._unsampled = [x for x in self._unsampled if x[0].first_token_s is None or x[0].first_token_s > t]
        for req, backlog, sent, uncached in sorted(seen, key=lambda x: x[0].first_token_s):
            sample = tt.prefill_rate_sample(backlog, uncached, req.first_token_s - sent)
            self.prefill_rate = tt.learned_prefill_rate(self.prefill_rate, sample)

    def _pool(self, ready: list[ReplicaSlot], choice: SlotChoice | None, t: float, klass: str | None
              ) -> ov.PoolState:
        n = len(ready)
        waiting = sum(s.replica.waiting for s in ready)
        if self.cfg.waiting_includes_prefill:
            waiting += sum(len(s.replica.prefilling) for s in ready)
        running = sum(s.replica.running for s in ready)
        pred = None
        if choice and self.cfg.ttft_from_prefill_backlog:
            self._learn_prefill_rate(t)
            slot, rep = choice.slot, choice.slot.replica
            slot.hold, slot.hold_at = tt.slot_hold_update(slot.hold, rep.running, slot.finished, t - slot.hold_at), t
            engine_rate = None if self.cfg.learned_prefill_rate else rep.prefill_rate
            wait = tt.admission_wait_s(slot.hold.mean_s, rep.running + rep.waiting, rep.p.max_num_seqs, rep.backlog,
                                       choice.uncached, rep.kv_usage, rep.p.kv_capacity_tokens)
            pred = tt.predict_ttft_from_backlog(rep.backlog, choice.uncached, engine_rate, self.prefill_rate, wait)
        elif choice:
            # The request's own prefill time stands in for the gateway's base TTFT estimate.
            base = choice.uncached / self.cfg.profile.prefill_tokens_per_s
            pred = tt.predict_ttft_s(waiting / n, running / n, self.e2e_ewma, base)
        of_class = sum(q.klass == klass for q, _ in self.held) if klass else 0
        return ov.PoolState(ready=n, waiting=waiting, predicted_ttft_s=pred, held=len(self.held), budget=self.budget,
                            held_of_class=of_class)

    def _dispatch(self, ready: list[ReplicaSlot], r: SimRequest, info: ov.RequestInfo, t: float) -> bool:
        """Route one request by the gateway's overflow rule; False when it stays held."""
        pol, held = self.cfg.overflow, info.held
        choice = self._choose(ready, r, t)
        pool = self._pool(ready, choice, t, r.klass)
        need = None if held else ov.replicas_needed(pool, pol)
        if need is not None:
            observe(self.needed, need)
        d = ov.overflow_decision(pool, pol, info, t)
        if d.reason == ov.SHARE_SPENT and not held:  # once per request, as the gateway counts it
            self.declined += 1
        if d.target == "local":
            best = choice.slot
            best.recent_work, best.recent_at = choice.recent_work, t
            if r.adapter is not None:
                self.adapters.sent(best.name, r.adapter)
            r.where = "local"
            if not best.replica.fits(r):
                r.where = "rejected"
                self._release(r)
                return True
            backlog = best.replica.backlog
            best.replica.submit(r, t)
            if self.cfg.ttft_from_prefill_backlog:  # r.left: what its prefix cache leaves, as the gateway expects
                self._unsampled.append((r, backlog, t, r.left))
            best.prompt_tokens += r.prompt
        elif d.target == "overflow":
            self.budget = ob.budget_take(self.budget, pol.budget, info.tokens, t)
            r.where, r.first_token_s = "overflow", t + self.cfg.external_ttft_s
            r.finish_s = r.first_token_s + max(r.output - 1, 0) * self.cfg.external_tpot_s
            self.overflowed += 1
            self.overflowed_tokens += info.tokens
            if r.tenant in self.tenants:
                self.tenants[r.tenant] = tn.overflow_taken(self.tenants[r.tenant], self._limits_of(r.tenant),
                                                           info.tokens, t)
            heapq.heappush(self._overflow_ends, (r.finish_s, id(r), r))
        elif d.target == "reject":
            r.where = "rejected"
            self._release(r)
        else:
            return False
        return True
