"""Clairvoyant schedules: the desired count follows the schedule, and the simulator still charges cold starts."""

import pytest
from floodway.operator.simulator.bound import Schedule, run_schedule
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
