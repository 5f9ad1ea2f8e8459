"""Foresight in the simulator: our policy's ticks keep the service's history and read its forecast through the
operator's own `forecast.foresee`, so on days that repeat the pool is up before the morning ramp that the reactive
policy answers a cold start late; multi-day traces (traces.weekly) carry the weekly pattern."""

from floodway.operator.simulator import compare
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.scenarios import WEEK_DAY_S
from floodway.operator.simulator.traces import rate_stats, weekly

SIZING = compare.Sizing(static_peak=4, static_mean=2, initial=1, max_replicas=8)
HOUR = WEEK_DAY_S / 24


def test_the_weekly_trace_has_office_hours_quiet_weekends_and_bursts_that_do_not_recur():
    days = weekly(days=7, day_s=WEEK_DAY_S, bursts_per_day=0, seed=1)
    per_day = [sum(1 for r in days if d * WEEK_DAY_S <= r.arrival_s < (d + 1) * WEEK_DAY_S) for d in range(7)]
    assert min(per_day[:5]) > 1.8 * max(per_day[5:])  # weekends at 0.4x the weekday peak
    night = [r for r in days if r.arrival_s % WEEK_DAY_S < 6 * HOUR]
    assert rate_stats(night, HOUR)[0] < 0.25 * rate_stats(days, HOUR)[1]
    bursty = weekly(days=7, day_s=WEEK_DAY_S, seed=1)
    assert len(bursty) > len(days) * 1.02  # two 20-minute bursts a day at 2x


def test_on_the_third_day_the_pool_is_up_before_the_ramp_and_overflows_less_than_reacting():
    _, cfg, ours, _, _ = prepare(Options(scenario="weeks"))
    assert ours.day_s == WEEK_DAY_S and ours.forecast_lead_seconds == cfg.cold_start_s
    trace = weekly(days=3, day_s=WEEK_DAY_S, peak_rate=4.0, night_rate=0.3, bursts_per_day=0, output_tokens=800)
    _, (fore, react) = compare.run(trace, ["floodway+overflow", "floodway-reactive+overflow"], cfg, ours, SIZING)

    def desired_at(res, t):
        return max(row["desired"] for row in res.timeline if t - 60 <= row["t"] <= t)
    ramp = 2 * WEEK_DAY_S + 7 * HOUR  # Wednesday 7:00, when the ramp starts
    assert desired_at(fore, ramp + HOUR) > desired_at(react, ramp + HOUR)
    assert any("history expects" in why for t, _, why in fore.reasons)
    assert all(t >= 2 * WEEK_DAY_S for t, _, why in fore.reasons if "history expects" in why)  # two days kept first

    def overflowed(res, start, end):
        return sum(1 for r in res.requests if start <= r.arrival_s < end and r.where == "overflow")
    day3 = (2 * WEEK_DAY_S, 3 * WEEK_DAY_S)
    assert overflowed(fore, *day3) < overflowed(react, *day3)
    assert overflowed(fore, 0, WEEK_DAY_S) == overflowed(react, 0, WEEK_DAY_S)  # no history yet: the same run
