"""The overflow API's circuit breaker: open after consecutive failures, one probe after a cooldown. Pure: `now` is
passed in and every state is a frozen dataclass returned anew."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 3  # consecutive failures that open the breaker
    cooldown_s: float = 10.0  # open this long, then one probe request is let through


@dataclass(frozen=True)
class BreakerState:
    consecutive_failures: int = 0
    opened_at: float | None = None
    probing: bool = False  # a probe request is in flight (half-open)


def breaker_allows(state: BreakerState, policy: BreakerPolicy, now: float) -> bool:
    if state.opened_at is None:
        return True
    return not state.probing and now - state.opened_at >= policy.cooldown_s


def breaker_on_send(state: BreakerState, policy: BreakerPolicy, now: float) -> BreakerState:
    """Call when a request is sent to the overflow API: after the cooldown it becomes the one probe."""
    if state.opened_at is not None and not state.probing and now - state.opened_at >= policy.cooldown_s:
        return replace(state, probing=True)
    return state


def breaker_on_result(state: BreakerState, policy: BreakerPolicy, ok: bool, now: float) -> BreakerState:
    """Call with the outcome of an overflow request (ok: it got a first byte without an error status)."""
    if ok:
        return BreakerState()
    failures = state.consecutive_failures + 1
    if state.probing or failures >= policy.failure_threshold:
        return BreakerState(failures, now, False)
    return BreakerState(failures, state.opened_at, state.probing)


def breaker_retry_after_s(state: BreakerState, policy: BreakerPolicy, now: float) -> float:
    if state.opened_at is None:
        return 0.0
    return max(0.0, state.opened_at + policy.cooldown_s - now)
