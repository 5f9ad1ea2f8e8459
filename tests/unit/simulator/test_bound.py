"""Clairvoyant schedules: the desired count follows the schedule, and the simulator still charges cold starts."""

from dataclasses import replace

import pytest
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.planner.prices import Prices
from floodway.operator.simulator import bound
from floodway.operator.simulator.bound import Schedule, following, main, near_peak, run_schedule, token_pool
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.traces import TraceRequest, steps

CFG = SimConfig(profile=ReplicaProfile(max_num_seqs=16), cold_start_s=60.0)


def test_schedule_picks_the_count_of_its_span():
    s = Schedule((0.0, 60.0, 300.0), (1, 3, 2))
    assert [s.at(t) for t in (0, 59, 60, 299, 300, 1e6)] == [1, 1, 3, 3, 2, 2]


@pytest.mark.parametrize("starts, counts", [((), ()), ((10.0,), (1,)), ((0.0, 5.0), (1,)),
                                            ((0.0, 9.0, 5.0), (1, 2, 1)), ((0.0,), (-1,))])
def test_bad_schedules_are_rejected(starts, counts):
    with pytest.raises(ValueError, match="schedule"):
        Schedule(starts, counts)


def test_a_smaller_pool_spends_more_overflow_and_fewer_replica_hours():
    tr = steps([2, 8, 2], step_s=180, seed=3)
    big = run_schedule(tr, Schedule((0.0,), (3,)), CFG)
    small = run_schedule(tr, Schedule((0.0, 300.0), (3, 1)), CFG)
    assert small.replica_hours < big.replica_hours
    assert small.overflow_share > big.overflow_share
    # Capacity asked for when the burst starts (180 s) comes a cold start later: overflow meanwhile.
    early = run_schedule(tr, Schedule((0.0, 100.0), (1, 3)), CFG)
    late = run_schedule(tr, Schedule((0.0, 180.0), (1, 3)), CFG)
    assert late.overflow_share > early.overflow_share


def test_following_sizes_each_span_for_its_rate_and_asks_a_lead_ahead():
    tr = steps([2, 8, 2], step_s=180, seed=3)
    s = following(tr, per_replica_rps=3.0, window_s=60.0, lead_s=0.0)
    assert s.at(0) == 1 and s.at(200) == 3 and s.at(400) == 1
    # Asked a cold start ahead: up 120 s before the busy span, down only when it ends.
    led = following(tr, per_replica_rps=3.0, window_s=60.0, lead_s=120.0)
    assert led.at(60) == 3 and led.at(359) == 3 and led.at(400) == 1
    assert following(tr, per_replica_rps=30.0, window_s=60.0, lead_s=0.0).counts == (1,)  # at least one replica
    with pytest.raises(ValueError, match="rate per replica"):
        following(tr, per_replica_rps=0.0, window_s=60.0, lead_s=0.0)


def test_near_peak_schedules_stay_valid_on_a_trace_shorter_than_their_drops():
    for end_s in (60.0, 900.0):
        for name, s in near_peak(4, end_s):
            assert set(s.counts) <= {2, 3} and s.starts_s == tuple(sorted(s.starts_s)), name
    assert near_peak(1, 900.0) == []  # no pool below one replica


def test_bound_cli_prints_the_least_replica_hours_meeting_the_targets_and_reacting_to_the_past(capsys, monkeypatch):
    # Three schedules instead of the full sweep, on the short-bursts trace 4x faster: quick. Static peak (9) meets
    # the targets on this trace by its definition; a reactive flat 9 ties it.
    monkeypatch.setattr(bound, "near_peak", lambda peak, end_s: [("flat 1", Schedule((0.0,), (1,)))])
    monkeypatch.setattr(bound, "rate_following", lambda trace, peak, lead_s: [("flat 9", Schedule((0.0,), (9,)))])
    monkeypatch.setattr(bound, "flat_pools", lambda peak: [])
    monkeypatch.setattr(bound, "token_pools", lambda trace, rate, first, lead_s: [
        (bound.REACTIVE + "flat 9 again", Schedule((0.0,), (9,)))])
    main(["short-bursts", "--compress", "4"])
    out = capsys.readouterr().out
    assert "short-bursts with --compress 4" in out and "| flat 1 |" in out and "| reactive: flat 9 again |" in out
    assert "least replica-hours at >= 99% attainment and <= 5% overflow: 2.248, 100.0% of static peak (flat 9)" in out
    assert ("least replica-hours at >= 99% attainment and <= 5% overflow, reacting to the past: 2.248, 100.0% of "
            "static peak (reactive: flat 9 again)") in out


def test_bound_cli_runs_the_families_named_with_the_static_peak_given(capsys, monkeypatch):
    # A multi-day trace runs minutes per schedule: --families picks the families, --static-peak skips its search.
    monkeypatch.setattr(bound, "flat_pools", lambda peak: [(f"flat {peak}", Schedule((0.0,), (peak,)))])
    monkeypatch.setattr(bound, "near_peak", lambda peak, end_s: pytest.fail("near-peak was not asked for"))
    main(["short-bursts", "--compress", "4", "--families", "flat", "--static-peak", "9"])
    out = capsys.readouterr().out
    assert "static peak 9 replicas" in out and "| flat 9 |" in out and "follow" not in out and "busiest" not in out
    with pytest.raises(SystemExit):
        main(["short-bursts", "--families", "flat,nearest"])


def test_reactive_rules_see_only_the_past():
    # 10 quiet seconds of 100-token prompts, a burst of 20 x 5000 tokens in 20-25 s, then quiet to 200 s.
    trace = [TraceRequest(float(t), 100, 10) for t in range(20)] \
        + [TraceRequest(20 + i / 4, 5000, 10) for i in range(20)] \
        + [TraceRequest(float(t), 100, 10) for t in range(30, 200)]
    trace.sort(key=lambda r: r.arrival_s)
    s = token_pool(trace, span_s=5.0, tokens_per_replica_s=1000.0, hold_s=60.0, floor=1, first=2)
    assert s.at(0.0) == 2 and s.at(20.0) == 1  # before the burst: the floor (first only until the first tick)
    assert s.at(24.9) == 1  # the burst's span is not seen whole until 25 s
    assert s.at(25.0) == 20  # 100k tokens in 5 s at 1000 tokens/s per replica
    assert s.at(84.9) == 20 and s.at(85.0) == 1  # held for 60 s after the span ends, then the floor
    # Later arrivals cannot change what it asked for before them.
    assert token_pool(trace[:20], 5.0, 1000.0, 60.0, 1, 2).counts == (2, 1)
    # A cold start's lead (60 s here) asks for the burst's pool from the start and lets it go once the burst is over.
    ahead = token_pool(trace, 5.0, 1000.0, 0.0, 1, None, lead_s=60.0)
    assert ahead.at(0.0) == ahead.at(24.9) == 20 and ahead.at(25.0) == 1
    with pytest.raises(ValueError):
        token_pool(trace, 0.0, 1000.0, 60.0, 1, 1)
    names = [n for n, _ in bound.schedules(trace, 3, 60.0, 25_000.0, 2)]
    assert {"flat 1", "flat 2", "flat 3"} <= set(names)
    reacting = [n for n in names if n.startswith(bound.REACTIVE)]
    assert len(reacting) == len([n for n in names if n.endswith("60 s ahead")]) == 36


def test_the_flat_family_starts_at_no_replica_and_priced_it_is_the_cheapest_where_the_api_costs_less():
    assert [n for n, _ in bound.flat_pools(2)] == ["flat 0", "flat 1", "flat 2"]
    tr = steps([2], step_s=300, seed=3)  # 2 req/s of short requests for 5 minutes
    cfg = SimConfig(profile=ReplicaProfile(max_num_seqs=16), cold_start_s=60.0, overflow=OverflowPolicy(enabled=True),
                    prices=Prices(3.0, 0.2, 0.6))
    results = [(name, run_schedule(tr, s, cfg)) for name, s in bound.flat_pools(2)]
    none = dict(results)["flat 0"]
    assert none.attainment == 1.0 and none.overflow_share == 1.0 and none.replica_hours == 0.0
    # $3 an hour for a replica is more than the API bills for these requests: sending them all there costs least.
    assert bound.cheapest_schedule(results)[0] == "flat 0"
    assert bound.best_schedule(results)[0] != "flat 0"  # replica-hours within 5% overflow: never all of it
    # At $300 per million prompt tokens the API is the dear choice.
    dear = replace(cfg, prices=Prices(3.0, 300.0, 600.0))
    assert bound.cheapest_schedule([(n, run_schedule(tr, s, dear)) for n, s in bound.flat_pools(2)])[0] != "flat 0"
