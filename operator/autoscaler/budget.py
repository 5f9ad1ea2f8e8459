"""The autoscaling policy's overflow budget (policy.py; `overflow_share` > 0, only where the gateway overflows).

The policy spends up to that share of requests on the overflow API instead of paying every peak back with replicas,
like an error budget. It tracks the share spent (the gateway's counters, decayed over `overflow_budget_window_s` as the
gateway decays its own: gateway/overflow_budget.py) and allows up to twice the target share now while underspent, less
once overspent. It pays back requests, not tokens: prompts too long for any replica to prefill within the TTFT SLO
hold 3-9% of the tokens of spiky and long-context traffic, which no replica added brings back (paying back tokens as
well, the policy still overflowed 8-24% of the tokens of the spiky, Mooncake and long-context traces, for up to 1.5x
the replica-hours on spiky ones: docs/benchmarks/2026-12-03-overflow-budget.md). The token share is held by the
gateway where autoscaling.priority is budget, and reported by the OverflowBudget condition (`OverflowSpend` counts
it).

While some share is allowed, sizing counts the local pool's in-flight requests only up to its ready capacity (the
gateway overflows the rest, so a saturated pool is not a shortage) plus the requests that wanted the overflow API
(overflowed, or kept local as the gateway's share was spent) beyond the allowed share (`excess_overflow_rate`), and
scale-down takes the smallest pool whose predicted overflow over the stabilization window (requests in flight above
its target) stays within the allowed
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
from floodway.operator.gateway.overflow_budget import ShareSpend, share_added, spent_shares


@dataclass(frozen=True)
class OverflowSpend:
    """The requests and tokens arrived and overflowed, and the requests the gateway kept from overflowing as its share
    was spent, all decayed over the budget's window; `share.at`: the last update (None: never)."""

    share: ShareSpend = ShareSpend()
    declined: float = 0.0


def spend(state: OverflowSpend, signals: Signals, window_s: float, now: float) -> OverflowSpend:
    """The counts after what arrived, overflowed and was declined since the last tick (rates x elapsed time)."""
    dt = 0.0 if state.share.at is None else max(0.0, now - state.share.at)
    share = share_added(state.share, now, signals.arrival_rate * dt, signals.overflow_rate * dt,
                        signals.request_token_rate * dt, signals.overflow_token_rate * dt, window_s)
    return OverflowSpend(share, state.declined * math.exp(-dt / window_s) + signals.declined_rate * dt)


def allowed_share(state: OverflowSpend, overflow_share: float, priority: str) -> float:
    """Overflow share of requests the policy tolerates now: up to 2x the target while underspent, less once
    overspent; with priority budget never more than the target, where the gateway caps overflow (planning for more
    would leave the pool short of what the gateway then keeps local)."""
    spent = spent_shares(state.share)[0]
    return min((1 if priority == "budget" else 2) * overflow_share, max(0.0, 2 * overflow_share - spent))


def excess_overflow_rate(signals: Signals, allow: float) -> float:
    """Requests/s that wanted the overflow API (sent there, or kept local as the gateway's share was spent: a shortage
    all the same) beyond the allowed share of the requests arriving."""
    return max(0.0, signals.overflow_rate + signals.declined_rate - allow * signals.arrival_rate)


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
