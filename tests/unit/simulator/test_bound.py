"""Clairvoyant schedules: the desired count follows the schedule, and the simulator still charges cold starts."""

import pytest
from floodway.operator.simulator import bound
from floodway.operator.simulator.bound import Schedule, following, main, near_peak, run_schedule
from floodway.operator.simulator.des import SimConfig
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.traces import steps

pytestmark = pytest.mark.unit

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


def test_bound_cli_prints_the_least_replica_hours_meeting_the_targets(capsys, monkeypatch):
    # Two schedules instead of the full sweep, on the short-bursts trace 4x faster: quick.
    monkeypatch.setattr(bound, "near_peak", lambda peak, end_s: [("flat 1", Schedule((0.0,), (1,)))])
    monkeypatch.setattr(bound, "rate_following", lambda trace, peak, lead_s: [("flat 8", Schedule((0.0,), (8,)))])
    main(["short-bursts", "--compress", "4"])
    out = capsys.readouterr().out
    assert "short-bursts with --compress 4" in out and "| flat 1 |" in out and "| flat 8 |" in out
    assert "least replica-hours at >= 99% attainment and <= 5% overflow: " in out
