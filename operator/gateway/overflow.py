"""The overflow rule: where a request goes (local, overflow, hold, reject), as a pure function of plain data; the
budget (overflow_budget.py), the breaker (breaker.py) and the TTFT prediction (ttft.py) are its inputs.

The gateway and the autoscaler's simulator call the same functions. Nothing here reads a clock: `now` is
passed in (seconds, any monotonic origin), and every state is a frozen dataclass returned anew.

Inputs of `overflow_decision(pool, policy, request, now)`:
- `pool` (PoolState): what the gateway knows of the local pool right now: `ready` (ready local replicas
  the request may still go to; the proxy leaves out replicas that already failed this request),
  `waiting` (requests queued on those replicas: scraped `vllm:num_requests_waiting`, refreshed with the
  gateway's own dispatch counts since the scrape), `predicted_ttft_s` (None when unknown: see
  `ttft.predict_ttft_from_backlog`), `held`
  (requests already held in the gateway's queue, not counting this one), and the overflow `budget` and
  `breaker` states.
- `policy` (OverflowPolicy): the service's overflow settings (thresholds, SLO, budget limits, hold queue).
- `request` (RequestInfo): estimated tokens, arrival time, the opt-out header, whether it is already held,
  and whether a local replica or the overflow API already failed it before its first byte.

Rule, in order: a trigger fires when there is no ready replica, when waiting per ready replica reaches
`max_waiting_per_replica`, or when the predicted TTFT exceeds `predicted_ttft_factor` x the TTFT SLO (the request's
class's where it has one).
No trigger: local. Trigger and overflow allowed (enabled, no opt-out, a model overflow.models maps, its tenant's
overflow cap not spent (tenants.py), its class may overflow, breaker closed or probing, budget left, the API has not
failed this request): overflow. Opt-out, an unmapped model (adapters.overflow_model), the tenant's overflow cap
spent, a class that may not overflow, overflow disabled, the API failed this request or its breaker is open (an
outage must not turn servable traffic into errors), or the overflow share spent (`SHARE_SPENT`,
autoscaling.priority budget: the budget wins over the SLO, and a wait would not earn it back before the SLO passed):
local when a replica is ready (the engines queue it, and answer 429 themselves when full), except for a class with
a queueLimit, whose blocked requests wait in the gateway's queue within it (`_hold_or_reject`). Per-minute budget spent:
the request waits in the gateway's bounded hold queue for local capacity or budget, re-evaluated until
`hold_timeout_s` after arrival; a full queue or a passed deadline rejects it (429 with Retry-After). With no ready
replica, every blocked request waits there the same way. Which held request leaves first, when several could, is
the proxy's fair share between tenants (fair_share.py), not this rule's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from floodway.operator.gateway.breaker import BreakerPolicy, BreakerState, breaker_allows, breaker_retry_after_s
from floodway.operator.gateway.overflow_budget import BudgetLimits, BudgetState, budget_wait_s, share_allows
from floodway.operator.spec.models import OverflowSpec

Target = Literal["local", "overflow", "hold", "reject"]
# The reason a request the triggers would overflow stays local: the overflow share is spent (priority budget).
SHARE_SPENT = "share_spent"
_SPEC = OverflowSpec()


@dataclass(frozen=True)
class OverflowPolicy:
    enabled: bool = _SPEC.enabled
    max_waiting_per_replica: float = _SPEC.max_waiting_per_replica
    ttft_slo_s: float | None = None
    # Overflow a little before the predicted TTFT reaches the SLO: predictions err (docs/benchmarks/).
    predicted_ttft_factor: float = 0.9
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    hold_queue_size: int = 64
    hold_timeout_s: float = 10.0
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


@dataclass(frozen=True)
class PoolState:
    ready: int
    waiting: float = 0.0
    predicted_ttft_s: float | None = None
    held: int = 0
    budget: BudgetState = field(default_factory=BudgetState)
    breaker: BreakerState = field(default_factory=BreakerState)
    held_of_class: int = 0  # of `held`, those of the request's class


@dataclass(frozen=True)
class RequestInfo:
    tokens: int  # estimated prompt + completion tokens, what the token budget is charged
    arrived_at: float
    opt_out: bool = False
    unmapped_model: bool = False  # an adapter (or model) overflow.models has no entry for: the API cannot serve it
    tenant_capped: bool = False  # its tenant's overflow cap (max_overflow_tokens_per_minute) is spent
    class_local: bool = False  # its class (spec.classes) may not overflow
    ttft_slo_s: float | None = None  # its class's TTFT SLO, in place of the policy's
    tpot_slo_s: float | None = None  # its class's TPOT SLO, in place of the service's (attainment only)
    queue_limit: int | None = None  # its class's queueLimit: blocked, it waits in the gateway's queue (see below)
    held: bool = False
    local_failed: bool = False
    overflow_failed: bool = False


@dataclass(frozen=True)
class OverflowDecision:
    target: Target
    reason: str
    retry_after_s: float | None = None  # set for "reject": when a retry may succeed


def overflow_trigger(pool: PoolState, policy: OverflowPolicy, request: RequestInfo) -> str | None:
    """The reason local capacity is short for this request, or None."""
    if pool.ready <= 0:
        return "local_error" if request.local_failed else "no_ready_backend"
    if pool.waiting / pool.ready >= policy.max_waiting_per_replica:
        return "queue_depth"
    slo = request.ttft_slo_s or policy.ttft_slo_s
    if slo is not None and pool.predicted_ttft_s is not None and \
            pool.predicted_ttft_s > slo * policy.predicted_ttft_factor:
        return "predicted_ttft"
    return None


# Bounds of the gateway's floodway_gateway_replicas_needed histogram: the pool sizes a scale-down asks about.
REPLICAS_NEEDED_BUCKETS = (*range(1, 17), 20, 24, 32, 48, 64, 96, 128)


def replicas_needed(pool: PoolState, policy: OverflowPolicy) -> float | None:
    """The smallest pool that would have kept this request within the overflow threshold: its predicted TTFT x the
    ready replicas / (predicted_ttft_factor x the TTFT SLO), taking the work ahead of it to spread over the pool.
    Its own prefill does not spread, so the overflow a smaller pool would have had, read from these, is overstated,
    never understated. None: no prediction, no ready replica or no TTFT SLO."""
    if pool.predicted_ttft_s is None or pool.ready <= 0 or not policy.ttft_slo_s:
        return None
    return pool.predicted_ttft_s * pool.ready / (policy.ttft_slo_s * policy.predicted_ttft_factor)


def _blocked_reason(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, now: float) -> str | None:
    """Why this request may not overflow now, or None when it may."""
    if request.opt_out:
        return "opt_out"
    if request.unmapped_model:
        return "model_not_mapped"
    if request.tenant_capped:
        return "tenant_overflow_cap"
    if request.class_local:
        return "class_local"
    if not policy.enabled:
        return "overflow_disabled"
    if request.overflow_failed:
        return "overflow_failed"
    if not breaker_allows(pool.breaker, policy.breaker, now):
        return "breaker_open"
    if budget_wait_s(pool.budget, policy.budget, request.tokens, now) > 0.0:
        return "budget_exhausted"
    if not share_allows(pool.budget, policy.budget, request.tokens, now):
        return SHARE_SPENT
    return None


def _retry_after_s(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, blocked: str, now: float) -> float:
    if blocked == "budget_exhausted":
        wait = budget_wait_s(pool.budget, policy.budget, request.tokens, now)
    elif blocked == "breaker_open":
        wait = breaker_retry_after_s(pool.breaker, policy.breaker, now)
    else:
        wait = 0.0
    return max(1.0, math.ceil(min(wait, 3600.0)))


def overflow_decision(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, now: float) -> OverflowDecision:
    """Where this request goes now: "local", "overflow", "hold" (wait in the gateway, ask again) or "reject"."""
    trigger = overflow_trigger(pool, policy, request)
    if trigger is None:
        return OverflowDecision("local", "held_then_local" if request.held else "local")
    blocked = _blocked_reason(pool, policy, request, now)
    if blocked is None:
        return OverflowDecision("overflow", trigger)
    if blocked != "budget_exhausted" and pool.ready > 0 and request.queue_limit is None:
        return OverflowDecision("local", blocked)
    return _hold_or_reject(pool, policy, request, blocked, now)


def _hold_or_reject(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, blocked: str, now: float
                    ) -> OverflowDecision:
    """A blocked request waits in the gateway's queue, within its bounds: its class's, where the class has a
    queueLimit (at most that many of the class held at once; refused once its class's TTFT SLO cannot be met by
    waiting: the time it waited plus the TTFT predicted now reach the SLO, and the wait only adds), then
    hold_timeout_s after arrival and hold_queue_size held in all. Past one: rejected (429 with Retry-After)."""
    retry_after = _retry_after_s(pool, policy, request, blocked, now)
    waited = now - request.arrived_at
    if request.queue_limit is not None:
        if request.ttft_slo_s is not None and waited + (pool.predicted_ttft_s or 0.0) >= request.ttft_slo_s:
            return OverflowDecision("reject", f"class_ttft_slo:{blocked}", retry_after)
        if not request.held and pool.held_of_class >= request.queue_limit:
            return OverflowDecision("reject", f"class_queue_full:{blocked}", retry_after)
    if waited >= policy.hold_timeout_s:
        return OverflowDecision("reject", f"hold_timeout:{blocked}", retry_after)
    if not request.held and pool.held >= policy.hold_queue_size:
        return OverflowDecision("reject", f"hold_queue_full:{blocked}", retry_after)
    return OverflowDecision("hold", blocked)


# A pace below any healthy API's (the slowest hosted models stream ~20 tokens/s): a whole answer slower than this
# is taken for a stalled API, not a long answer. The gateway config's overflow.slowest_tokens_per_s defaults to it.
SLOWEST_TOKENS_PER_S = 10.0


def overflow_deadline_s(first_byte_timeout_s: float, answer_timeout_s: float, stream: bool,
                        completion_limit: int | None, slowest_tokens_per_s: float = SLOWEST_TOKENS_PER_S) -> float:
    """How long the overflow API may go without sending a byte before the attempt counts as failed (and is retried
    locally). A stream's first byte is its first token, so `first_byte_timeout_s`. A whole answer's first byte
    comes after its last token: the first-byte timeout plus the tokens the request allows at the slowest healthy
    pace, at most `answer_timeout_s` (the gateway's deadline for a whole answer), which is also the deadline where
    the request names no limit. With the first-byte timeout alone, every answer longer than it counted as a
    failure, was generated twice (the API's copy thrown away) and pushed the breaker towards open."""
    if stream:
        return first_byte_timeout_s
    if completion_limit is None:
        return answer_timeout_s
    return min(answer_timeout_s, first_byte_timeout_s + completion_limit / slowest_tokens_per_s)
