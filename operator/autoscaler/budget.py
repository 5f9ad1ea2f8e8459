"""The autoscaling policy's overflow budget (policy.py; `overflow_share` > 0, only where the gateway overflows).

The policy spends up to that share of requests on the overflow API instead of paying every peak back with replicas,
like an error budget. It tracks the share spent (decayed over `overflow_budget_window_s`) and allows up to twice the
target share now while underspent, less once overspent. While some share is allowed, sizing counts the local pool's
in-flight requests only up to its ready capacity (the gateway overflows the rest, so a saturated pool is not a
shortage) plus the overflowed concurrency beyond the allowed share, and scale-down takes the smallest pool whose
predicted overflow over the stabilization window (requests in flight above its target) stays within the allowed
share. Prompt tokens are then judged by what the gateway predicted for them: it exports, per request, the smallest
pool that would have kept its predicted TTFT within the overflow threshold (`floodway_gateway_replicas_needed`,
overflow.replicas_needed), and a replica is removed only while one fewer would have overflowed at most the allowed
share of the last `token_stabilization_s`'s requests (`overflow_if`). That is the hold's question asked in the
overflow rule's own terms, so bursts after quiet minutes keep what they needed. With a budget, prompt tokens add no
replica on their own either: the gateway overflows what a burst's prefill cannot meet, which the sizing counts
beyond the allowed share. Once the budget is spent (none allowed) scale-down decides as without one, so bursts that
spent it make it hold capacity.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

from floodway.operator.autoscaler.signals import Signals, share_within


@dataclass(frozen=True)
class OverflowSpend:
    """Decayed counts of requests arrived and overflowed, and when they were last updated."""

    arrived: float = 0.0
    overflowed: float = 0.0
    last_tick: float | None = None


def spend(state: OverflowSpend, signals: Signals, window_s: float, now: float) -> OverflowSpend:
    """The counts after the requests arrived and overflowed since the last tick (rates x elapsed time)."""
    dt = 0.0 if state.last_tick is None else max(0.0, now - state.last_tick)
    k = math.exp(-dt / window_s)
    return OverflowSpend(state.arrived * k + signals.arrival_rate * dt,
                         state.overflowed * k + signals.overflow_rate * dt, now)


def allowed_share(state: OverflowSpend, overflow_share: float) -> float:
    """Overflow share the policy tolerates now: up to 2x the target while underspent, less once overspent."""
    spent = state.overflowed / state.arrived if state.arrived > 0 else 0.0
    return min(2 * overflow_share, max(0.0, 2 * overflow_share - spent))


def service_attainment(signals: Signals, allow: float) -> float | None:
    """SLO attainment the users see: with an overflow budget, overflowed requests (answered by the API within
    the SLO) count with the local ones; without, the engines' attainment as measured."""
    a = signals.attainment
    if allow == 0 or a is None or signals.overflow_rate <= 0:
        return a
    return (a * signals.finished_rate + signals.overflow_rate) / (signals.finished_rate + signals.overflow_rate)


def overflow_if(needed: list[Mapping[float, float]], replicas: int) -> float | None:
    """The share of requests a pool of `replicas` would have overflowed, from the gateway's replicas-needed
    histograms (Signals.replicas_needed); None: no request observed."""
    within = total = 0.0
    for hist in needed:
        w, n = share_within(hist, replicas)
        within, total = within + w, total + n
    return 1 - within / total if total else None
