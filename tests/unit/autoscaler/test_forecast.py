"""Foresight from history (history.py, forecast.py) and the policy's pre-warm: what is kept and saved, which earlier
days are compared, that a peak seen on both is expected a lead ahead and a one-day burst or an unobserved minute is
not, and that the policy holds the pool such an expectation needs and nothing more."""

import random

import pytest
from floodway.operator.autoscaler.forecast import expected, foresee, lags_days
from floodway.operator.autoscaler.history import BUCKETS_PER_DAY, DAY_S, KEEP_DAYS, History
from floodway.operator.autoscaler.policy import ScalerState, decide

from tests.unit.autoscaler.conftest import P, run, sig

MIN = 60.0
H = 3600.0


def filled(days: int, rate, tick_s: float = 60.0) -> History:
    """A history of `days` days, each tick adding rate(t) req/s (and 100 prompt tokens each) over the tick."""
    h, t = History(), tick_s
    while t <= days * DAY_S:
        r = rate(t - tick_s)  # the rate over the tick that ends at t
        h.add(t - 1e-6, r * tick_s, 100 * r * tick_s)
        t += tick_s
    return h


def office(t: float) -> float:
    """1 req/s, 10 from 9:00 to 12:00 on weekdays (day 0 a Monday)."""
    day, s = divmod(t, DAY_S)
    return 10.0 if day % 7 < 5 and 9 * H <= s < 12 * H else 1.0


def test_history_counts_per_minute_forgets_after_keep_days_and_round_trips():
    h = History()
    h.add(30.0, 2.0, 200.0)
    h.add(59.0, 1.0, 100.0)
    h.add(61.0, 4.0, 400.0)
    assert h.buckets == {0: (3.0, 300.0), 1: (4.0, 400.0)}
    h.add(10.0, 1.0, 0.0)  # a clock stepped back counts into the latest minute
    assert h.buckets[1] == (5.0, 400.0) and list(h.buckets) == [0, 1]
    assert list(h.between(0.0, 180.0)) == [(3.0, 300.0), (5.0, 400.0), None]  # minute 2 unobserved
    h.add(KEEP_DAYS * DAY_S + 30.0, 1.0, 1.0)
    assert 0 not in h.buckets and 1 in h.buckets and h.since() == MIN
    back = History.loads(h.dumps())
    assert back.buckets == h.buckets and back.day_s == DAY_S
    for bad in ("", "not base64!", "aGVsbG8="):
        with pytest.raises(ValueError, match="not a saved history"):
            History.loads(bad)


def test_two_weeks_of_a_busy_service_fit_a_configmap():
    h = filled(KEEP_DAYS, lambda t: 37.3 + (t % 7), tick_s=MIN)
    assert len(h.buckets) == KEEP_DAYS * BUCKETS_PER_DAY
    assert len(h.dumps()) < 400_000  # a ConfigMap holds at most 1 MiB


def test_the_days_compared_grow_from_two_days_to_two_weeks():
    assert lags_days(1.9) == ()
    assert lags_days(2.0) == lags_days(6.9) == (1, 2)
    assert lags_days(7.0) == lags_days(13.9) == (1, 7)
    assert lags_days(14.0) == (7, 14)


def test_a_peak_seen_on_both_days_is_expected_a_lead_ahead():
    h = filled(3, office)  # Monday to Wednesday
    at = 3 * DAY_S + 9 * H - 5 * MIN  # Thursday 8:55: the span 9:00-9:05 starts within the lead
    assert expected(h, at - 5 * MIN, 5 * MIN).arrival_rate == pytest.approx(1.0)
    e = expected(h, at, 5 * MIN)
    assert e.lags_days == (1, 2) and e.arrival_rate == pytest.approx(10.0) and e.prompt_token_rate == \
        pytest.approx(1000.0)
    assert expected(h, 3 * DAY_S + 13 * H, 5 * MIN).arrival_rate == pytest.approx(1.0)  # after the peak


def test_a_burst_on_one_day_only_is_not_expected():
    h = filled(3, lambda t: 20.0 if DAY_S + 15 * H <= t < DAY_S + 16 * H else 1.0)  # Tuesday 15:00 only
    assert expected(h, 3 * DAY_S + 15 * H, 5 * MIN).arrival_rate == pytest.approx(1.0)


def test_unobserved_minutes_and_a_short_history_expect_nothing():
    assert expected(History(), 0.0, 300.0) is None
    assert expected(filled(1, office), DAY_S + 9 * H, 5 * MIN) is None  # one day: no second to confirm it
    h = filled(3, office)
    del h.buckets[int((2 * DAY_S + 9 * H) // MIN)]  # the operator was down yesterday at 9:00
    assert expected(h, 3 * DAY_S + 9 * H - 2 * MIN, 5 * MIN) is None


def test_the_weekly_pattern_keeps_weekend_quiet_and_monday_busy():
    week1 = filled(13, office)  # to Saturday of week 2: yesterday (Friday) was busy, last Saturday was not
    assert expected(week1, 12 * DAY_S + 9 * H, 5 * MIN).arrival_rate == pytest.approx(1.0)
    monday = filled(14, office)  # two weeks: the Mondays before, not Sunday, say what Monday brings
    e = expected(monday, 14 * DAY_S + 9 * H - 5 * MIN, 5 * MIN)
    assert e.lags_days == (7, 14) and e.arrival_rate == pytest.approx(10.0)


def test_on_traffic_with_no_pattern_the_expectation_stays_within_the_level():
    rng = random.Random(3)
    bursts = [rng.uniform(0, 6 * DAY_S) for _ in range(24)]  # four a day at random times, 20 minutes each
    h = filled(6, lambda t: 20.0 if any(b <= t < b + 20 * MIN for b in bursts) else 2.0 + rng.uniform(-0.2, 0.2))
    seen = [expected(h, 6 * DAY_S + k * 10 * MIN, 5 * MIN) for k in range(144)]
    hits = sum(1 for e in seen if e.arrival_rate > 2.2)  # a burst at the same time on both days compared
    assert hits <= 3, hits


def test_foresee_counts_the_tick_and_passes_the_expectation_on():
    h = filled(3, office)
    now = 3 * DAY_S + 9 * H - 5 * MIN
    s = foresee(h, sig(1, arrival_rate=1.0, prompt_token_rate=100.0, window_s=5.0), now, 5 * MIN)
    assert h.buckets[int(now // MIN)] == (5.0, 500.0)
    assert s.expected_arrival_rate == pytest.approx(10.0) and s.expected_prompt_token_rate == pytest.approx(1000.0)


def test_the_policy_prewarms_for_the_expectation_holds_it_and_lets_go_after():
    # 1 req/s running 10 s each (10 in flight: one replica of 10); 5 req/s expected: 50 in flight, 5 replicas.
    def at(t, n, expect):
        return sig(n, running=10, attainment=1.0, arrival_rate=1.0, finished_rate=1.0, window_s=5.0,
                   expected_arrival_rate=expect)
    reactive = run(P, ScalerState(1), lambda t, n: at(t, n, 0.0), 0, 600)
    assert {d.replicas for d in reactive} == {1}
    ds = run(P, ScalerState(1), lambda t, n: at(t, n, 5.0 if t < 300 else 0.0), 0, 900)
    assert ds[0].replicas == 1 + P.max_scale_up_step and ds[0].reason.startswith("scale up: history expects 5.00")
    assert max(d.replicas for d in ds) == 5
    # Held while expected and for the stabilization window after, then down step by step to what the load needs at
    # scale_down_utilization (2 replicas for 10 in flight).
    held_until = 300 + P.scale_down_stabilization_seconds - P.interval_seconds
    assert all(d.replicas == 5 for d in ds[:int(held_until // P.interval_seconds)])
    assert ds[-1].replicas == 2


def test_a_service_scaled_to_zero_is_up_before_its_morning():
    """With replicas.min 0 the pool scales to zero at night and comes back a lead before the expected traffic,
    with no request yet to wake it."""
    from dataclasses import replace

    p = replace(P, replicas_min=0, scale_to_zero_after_seconds=60.0)
    night = run(p, ScalerState(1), lambda t, n: sig(n, attainment=None), 0, 300)
    assert night[-1].replicas == 0
    morning = decide(night[-1].state, sig(0, expected_arrival_rate=2.0), p, 305)
    assert morning.replicas == 2 and "history expects 2.00 req/s" in morning.reason  # 2 req/s x 10 s assumed
