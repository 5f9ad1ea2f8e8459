"""Foresight from a service's own history (history.py): the traffic expected within the next cold start, from the
same time on earlier days, so replicas are ready when a recurring peak comes instead of a cold start after it.

A peak counts as recurring when it was there on each of two earlier days compared at the same time of day: the last
two days while the history is shorter than a week; then yesterday and the same weekday a week ago (a weekday peak
is not expected on a Saturday, nor Sunday's quiet on a Monday); from two weeks on, the same weekday one and two weeks
ago. Each day's figure is its busiest SMOOTH_BUCKETS-bucket span starting within [t, t + lead] shifted back to it,
and the expectation is the least of the two: a burst seen on one day only (no pattern) expects nothing beyond what
both days had. Any bucket of a window unobserved (the operator was down) and there is no expectation.
"""

from dataclasses import dataclass, replace

from floodway.operator.autoscaler.history import History
from floodway.operator.autoscaler.signals import Signals

SMOOTH_BUCKETS = 5  # a day's figure is the rate over this many buckets (5 minutes), not one minute's noise


@dataclass(frozen=True)
class Expected:
    arrival_rate: float  # requests/s
    prompt_token_rate: float  # prompt tokens/s
    lags_days: tuple[int, ...]  # the days compared, in days back


def lags_days(span_days: float) -> tuple[int, ...]:
    """The two earlier days compared, in days back, for a history this many days long (empty: too short)."""
    if span_days >= 14:
        return 7, 14
    if span_days >= 7:
        return 1, 7
    if span_days >= 2:
        return 1, 2
    return ()


def busiest(history: History, start_s: float, end_s: float) -> tuple[float, float] | None:
    """The highest (requests/s, prompt tokens/s) over SMOOTH_BUCKETS consecutive buckets within [start, end), each
    rate at its own busiest span; None when a bucket there is unobserved."""
    counts = list(history.between(start_s, end_s))
    if not counts or any(c is None for c in counts):
        return None
    n = min(SMOOTH_BUCKETS, len(counts))
    span_s = n * history.bucket_s
    sums = [tuple(sum(c[k] for c in counts[i:i + n]) for k in (0, 1)) for i in range(len(counts) - n + 1)]
    return max(s[0] for s in sums) / span_s, max(s[1] for s in sums) / span_s


def expected(history: History, now: float, lead_s: float) -> Expected | None:
    """What recurred in spans starting within [now, now + lead_s] on both compared days (lags_days), or None (no
    pattern known)."""
    since = history.since()
    if since is None:
        return None
    lags = lags_days((now - since) / history.day_s)
    # Spans that start within the lead, so the pool for a peak at now + lead is there now.
    end = now + lead_s + SMOOTH_BUCKETS * history.bucket_s
    seen = [busiest(history, now - lag * history.day_s, end - lag * history.day_s) for lag in lags]
    if not seen or any(s is None for s in seen):
        return None
    return Expected(min(s[0] for s in seen), min(s[1] for s in seen), lags)


def foresee(history: History, signals: Signals, now: float, lead_s: float) -> Signals:
    """Count this tick's arrivals into the history, and `signals` with what it expects within `lead_s` (the shells'
    one call: the operator's tick, `floodway up` and the simulator)."""
    history.add(now, signals.arrival_rate * signals.window_s, signals.prompt_token_rate * signals.window_s)
    e = expected(history, now, lead_s)
    if e is None:
        return signals
    return replace(signals, expected_arrival_rate=e.arrival_rate, expected_prompt_token_rate=e.prompt_token_rate)
