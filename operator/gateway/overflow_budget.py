"""The overflow budget: requests and tokens per minute the overflow API may take, as two token buckets. Pure: `now`
is passed in (seconds, any monotonic origin) and every state is a frozen dataclass returned anew."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetLimits:
    """Overflow budget per minute; None means unlimited."""

    max_requests_per_minute: float | None = None
    max_tokens_per_minute: float | None = None


@dataclass(frozen=True)
class BudgetState:
    """Two token buckets (requests, tokens), each refilling its per-minute limit evenly over 60 s and
    holding at most one minute's worth. Levels are None until the first `budget_refill` (then full)."""

    requests: float | None = None
    tokens: float | None = None
    at: float | None = None


def _refilled(level: float | None, limit: float | None, elapsed: float) -> float | None:
    if limit is None:
        return None
    if level is None:
        return float(limit)
    return min(float(limit), level + limit * elapsed / 60.0)


def budget_refill(state: BudgetState, limits: BudgetLimits, now: float) -> BudgetState:
    elapsed = 0.0 if state.at is None else max(0.0, now - state.at)
    return BudgetState(_refilled(state.requests, limits.max_requests_per_minute, elapsed),
                       _refilled(state.tokens, limits.max_tokens_per_minute, elapsed), now)


def _cost(tokens: int, limits: BudgetLimits) -> float:
    # A request larger than a whole minute's token budget costs the whole bucket instead of never fitting.
    return float(tokens) if limits.max_tokens_per_minute is None else min(float(tokens), limits.max_tokens_per_minute)


def budget_wait_s(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> float:
    """Seconds until the budget can pay for one request of `tokens` (0.0: it can now)."""
    state = budget_refill(state, limits, now)
    wait = 0.0
    for level, limit, cost in ((state.requests, limits.max_requests_per_minute, 1.0),
                               (state.tokens, limits.max_tokens_per_minute, _cost(tokens, limits))):
        if limit is not None and level < cost:
            wait = max(wait, math.inf if limit <= 0 else (cost - level) * 60.0 / limit)
    return wait


def budget_take(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> BudgetState:
    """Pays for one overflow request (call after a decision to overflow)."""
    state = budget_refill(state, limits, now)
    return BudgetState(None if state.requests is None else state.requests - 1.0,
                       None if state.tokens is None else state.tokens - _cost(tokens, limits), now)
