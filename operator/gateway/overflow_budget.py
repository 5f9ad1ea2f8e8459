"""The overflow budget. Pure: `now` is passed in (seconds, any monotonic origin) and every state is a frozen dataclass
returned anew.

Two kinds of limit, each optional:
- per minute (`overflow.maxRequestsPerMinute`, `maxTokensPerMinute`): two token buckets, a rate limit for the API;
- a share (`autoscaling.overflowShare` where `autoscaling.priority` is budget): overflow may take at most that share
  of the requests and of the tokens that reached the gateway, both counts decayed over `SHARE_WINDOW_S` (ShareSpend).
  A request overflows only if the share spent, counting it, stays within the limit in both units. The decayed
  credit (share x arrived - overflowed) never exceeds the undecayed one, so over any span from the gateway's start
  overflow stays within the share exactly (of the tokens as estimated); over a later span, by at most the share of
  the window's arrivals before it. A long prompt spends the budget by its tokens: where prompts are long, the token
  share is the one that binds.
The autoscaler reads the same spent shares (autoscaler/budget.py) from the gateway's counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# The horizon of the spent share, the gateway's and the autoscaler's (its overflow_budget_window_s).
SHARE_WINDOW_S = 1800.0


@dataclass(frozen=True)
class BudgetLimits:
    """Overflow budget; None means unlimited."""

    max_requests_per_minute: float | None = None
    max_tokens_per_minute: float | None = None
    max_share: float | None = None  # of the requests and of the tokens arriving, decayed over SHARE_WINDOW_S


@dataclass(frozen=True)
class ShareSpend:
    """Requests and tokens arrived and overflowed, decayed over a window, and when they were last decayed."""

    arrived: float = 0.0
    overflowed: float = 0.0
    arrived_tokens: float = 0.0
    overflowed_tokens: float = 0.0
    at: float | None = None


def share_decayed(s: ShareSpend, now: float, window_s: float = SHARE_WINDOW_S) -> ShareSpend:
    k = 1.0 if s.at is None else math.exp(-max(0.0, now - s.at) / window_s)
    return ShareSpend(s.arrived * k, s.overflowed * k, s.arrived_tokens * k, s.overflowed_tokens * k, now)


def share_added(s: ShareSpend, now: float, arrived: float = 0.0, overflowed: float = 0.0, arrived_tokens: float = 0.0,
                overflowed_tokens: float = 0.0, window_s: float = SHARE_WINDOW_S) -> ShareSpend:
    d = share_decayed(s, now, window_s)
    return ShareSpend(d.arrived + arrived, d.overflowed + overflowed, d.arrived_tokens + arrived_tokens,
                      d.overflowed_tokens + overflowed_tokens, now)


def spent_shares(s: ShareSpend) -> tuple[float, float]:
    """(share of requests, share of tokens) overflowed; 0 where nothing arrived."""
    return (s.overflowed / s.arrived if s.arrived > 0 else 0.0,
            s.overflowed_tokens / s.arrived_tokens if s.arrived_tokens > 0 else 0.0)


@dataclass(frozen=True)
class BudgetState:
    """Two token buckets (requests, tokens), each refilling its per-minute limit evenly over 60 s and
    holding at most one minute's worth. Levels are None until the first `budget_refill` (then full). `share`: what
    arrived and overflowed, for the share limit."""

    requests: float | None = None
    tokens: float | None = None
    at: float | None = None
    share: ShareSpend = ShareSpend()


def _refilled(level: float | None, limit: float | None, elapsed: float) -> float | None:
    if limit is None:
        return None
    if level is None:
        return float(limit)
    return min(float(limit), level + limit * elapsed / 60.0)


def budget_refill(state: BudgetState, limits: BudgetLimits, now: float) -> BudgetState:
    elapsed = 0.0 if state.at is None else max(0.0, now - state.at)
    return replace(state, requests=_refilled(state.requests, limits.max_requests_per_minute, elapsed),
                   tokens=_refilled(state.tokens, limits.max_tokens_per_minute, elapsed), at=now)


def _cost(tokens: int, limits: BudgetLimits) -> float:
    # A request larger than a whole minute's token budget costs the whole bucket instead of never fitting.
    return float(tokens) if limits.max_tokens_per_minute is None else min(float(tokens), limits.max_tokens_per_minute)


def budget_wait_s(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> float:
    """Seconds until the per-minute budget can pay for one request of `tokens` (0.0: it can now)."""
    state = budget_refill(state, limits, now)
    wait = 0.0
    for level, limit, cost in ((state.requests, limits.max_requests_per_minute, 1.0),
                               (state.tokens, limits.max_tokens_per_minute, _cost(tokens, limits))):
        if limit is not None and level < cost:
            wait = max(wait, math.inf if limit <= 0 else (cost - level) * 60.0 / limit)
    return wait


def budget_arrive(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> BudgetState:
    """Counts one request reaching the gateway (once, as it arrives, before its decision) for the share limit."""
    if limits.max_share is None:
        return state
    return replace(state, share=share_added(state.share, now, arrived=1.0, arrived_tokens=float(tokens)))


def share_allows(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> bool:
    """Whether overflowing one more request of `tokens` keeps the spent share within `max_share` in requests and in
    tokens (always, without a share limit)."""
    if limits.max_share is None:
        return True
    s = share_decayed(state.share, now)
    return (s.overflowed + 1.0 <= limits.max_share * s.arrived
            and s.overflowed_tokens + tokens <= limits.max_share * s.arrived_tokens)


def budget_take(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> BudgetState:
    """Pays for one overflow request (call after a decision to overflow)."""
    state = budget_refill(state, limits, now)
    share = state.share if limits.max_share is None else \
        share_added(state.share, now, overflowed=1.0, overflowed_tokens=float(tokens))
    return BudgetState(None if state.requests is None else state.requests - 1.0,
                       None if state.tokens is None else state.tokens - _cost(tokens, limits), now, share)
