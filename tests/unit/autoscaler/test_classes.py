"""SLO classes in the autoscaler: a class's cap (maxReplicas) bounds what its demand alone adds, and the SLO feedback
reads the classes' attainment (TTFT and TPOT together) where the gateways measure it, a class at its cap adding no
replica."""

from dataclasses import replace

import pytest
from floodway.operator.autoscaler.classes import measured, sampled, short_class, weighed_demand
from floodway.operator.autoscaler.policy import ScalerState, decide
from floodway.operator.autoscaler.signals import ClassCounts
from floodway.operator.controller.scaling import autoscaler_policy
from floodway.operator.spec import InferenceServiceSpec

from tests.unit.autoscaler.conftest import P, run, sig

CAPPED = replace(P, class_caps=(("batch", 2),))


def ttft(**by):
    """Each class's counts with its TTFT (within its SLO, measured) and no TPOT measured."""
    return {c: ClassCounts(ttft=pair) for c, pair in by.items()}


@pytest.mark.parametrize(("demand", "in_flight", "caps", "want"), [
    (100, {"batch": 100}, {"batch": 2}, 20),  # batch alone: up to its cap (2 x 10)
    (115, {"batch": 100}, {"batch": 2}, 20),  # the others' 15 fit within the cap: batch fills the rest of it
    (130, {"batch": 100}, {"batch": 2}, 30),  # the others need more than the cap: batch adds nothing
    (12, {"batch": 2}, {"batch": 2}, 12),  # under the cap: all of it counts
    (8, {"batch": 12}, {"batch": 2}, 8),  # never more than the demand itself
    (100, {"interactive": 100}, {"batch": 2}, 100),  # an uncapped class counts whole
    (200, {"a": 100, "b": 100}, {"a": 1, "b": 3}, 30),  # each capped class up to its own cap, smallest first
])
def test_a_capped_class_counts_up_to_its_cap(demand, in_flight, caps, want):
    assert weighed_demand(demand, in_flight, caps, 10.0) == pytest.approx(want)


def test_the_spec_s_max_replicas_becomes_the_policy_s_caps():
    spec = InferenceServiceSpec.model_validate({"model": "m", "classes": [
        {"name": "interactive"}, {"name": "batch", "priority": 10, "overflow": False, "maxReplicas": 2}]})
    assert autoscaler_policy(spec).class_caps == (("batch", 2),)


def test_a_flood_of_batch_requests_grows_the_pool_only_to_the_class_s_cap_interactive_ones_past_it():
    flood = {"batch": 200}
    d = decide(ScalerState(1), sig(1, running=10, waiting=190, attainment=1.0, class_in_flight=flood), CAPPED, 0)
    assert d.replicas == 2 and d.reason.startswith("panic")
    ds = run(CAPPED, d.state, lambda t, n: sig(n, running=10 * n, waiting=200 - 10 * n, attainment=1.0,
                                                class_in_flight=flood), 5, 600)
    assert {x.replicas for x in ds} == {2}
    # The same flood of interactive requests: the pool grows to what they need (replicas.max here).
    ds = run(CAPPED, ScalerState(1), lambda t, n: sig(n, running=10 * n, waiting=200 - 10 * n, attainment=1.0,
                                                       class_in_flight={"interactive": 200}), 0, 120)
    assert ds[-1].replicas == CAPPED.replicas_max
    # Interactive demand on top of a capped batch backlog adds its own replicas.
    mixed = {"batch": 200, "interactive": 40}
    ds = run(CAPPED, ScalerState(2), lambda t, n: sig(n, running=10 * n, waiting=240 - 10 * n, attainment=1.0,
                                                       class_in_flight=mixed), 0, 120)
    assert ds[-1].replicas == 4  # the interactive 40 at 10 per replica


def test_the_slo_feedback_reads_the_classes_and_skips_a_class_at_its_cap():
    def at(replicas, counts, attainment=1.0):
        return sig(replicas, running=10 * replicas, waiting=1, attainment=attainment, finished_rate=10.0,
                   window_s=5.0, class_slo=counts)
    batch_misses = ttft(batch=(10, 50), interactive=(50, 50))
    assert decide(ScalerState(2), at(2, batch_misses), CAPPED, 0).replicas == 2  # batch at its cap
    grown = decide(ScalerState(1), at(1, batch_misses), CAPPED, 0)  # below its cap: batch's misses add one
    assert grown.replicas == 2 and "class batch SLO attainment 0.200" in grown.reason
    interactive_misses = ttft(batch=(50, 50), interactive=(10, 50))
    d = decide(ScalerState(2), at(2, interactive_misses), CAPPED, 0)
    assert d.replicas == 3 and "class interactive" in d.reason
    # The engines' attainment (all classes mixed) does not decide where the classes are measured.
    assert decide(ScalerState(2), at(2, ttft(interactive=(50, 50)), attainment=0.2), CAPPED, 0).replicas == 2
    assert decide(ScalerState(2), at(2, {}, attainment=0.2), CAPPED, 0).replicas == 3  # not measured: the engines'


def test_a_class_meeting_its_ttft_but_missing_its_tpot_slo_is_short():
    # Every first token in time, but a third of the answers stream too slowly: 1 + 2/3 - 1 = 0.667 at least met both.
    slow = {"interactive": ClassCounts(ttft=(60, 60), tpot=(40, 60)), "batch": ClassCounts(ttft=(60, 60))}
    assert measured(slow)
    assert short_class(slow, {}, 2, 0.9, 1.0) == ("interactive", pytest.approx(2 / 3))
    d = decide(ScalerState(2), sig(2, running=20, waiting=1, attainment=1.0, finished_rate=10.0, window_s=5.0,
                                   class_slo=slow), CAPPED, 0)
    assert d.replicas == 3 and "class interactive SLO attainment 0.667" in d.reason
    # Both missed: the least share meeting both (0.9 + 0.8 - 1), never below zero.
    assert ClassCounts(ttft=(45, 50), tpot=(40, 50)).attainment == pytest.approx(0.7)
    assert ClassCounts(ttft=(10, 50), tpot=(10, 50)).attainment == 0.0
    # At its cap a class's TPOT misses add no replica either.
    assert short_class({"batch": slow["interactive"]}, {"batch": 2}, 2, 0.9, 1.0) is None
    assert short_class({"batch": slow["interactive"]}, {"batch": 2}, 1, 0.9, 1.0) == ("batch", pytest.approx(2 / 3))


def test_with_no_tpot_measured_a_class_is_judged_on_its_ttft_alone():
    assert ClassCounts(ttft=(45, 50)).attainment == pytest.approx(0.9)
    assert short_class(ttft(interactive=(50, 50)), {}, 2, 0.9, 1.0) is None
    assert short_class(ttft(interactive=(30, 50)), {}, 2, 0.9, 1.0) == ("interactive", pytest.approx(0.6))
    # TPOT alone (no TTFT measured) is no attainment: nothing measured, as for the engines.
    assert not measured({"interactive": ClassCounts(tpot=(0, 50))})
    assert short_class({"interactive": ClassCounts(tpot=(0, 50))}, {}, 2, 0.9, 1.0) is None


def test_the_noise_stands_on_the_smaller_of_the_counts_measured():
    assert sampled(ClassCounts(ttft=(50, 50))) == 50  # no TPOT measured: TTFT's
    assert sampled(ClassCounts(ttft=(50, 50), tpot=(4, 5))) == 5
    assert sampled(ClassCounts(ttft=(5, 5), tpot=(40, 50))) == 5
    assert sampled(ClassCounts()) == 0
    # 4 of 5 streamed in time over 50 first tokens in time: 0.8, within the noise of 5 answers at a 0.9 target.
    assert short_class({"c": ClassCounts(ttft=(50, 50), tpot=(4, 5))}, {}, 2, 0.9, 1.0) is None
    assert short_class({"c": ClassCounts(ttft=(40, 50))}, {}, 2, 0.9, 1.0) is not None  # 0.8 over 50: short


def test_a_class_missing_its_slo_at_its_cap_does_not_hold_a_larger_pool():
    # Four replicas, little load: scale-down goes ahead while capped batch misses (its cap is 2), and stops while
    # interactive misses.
    def quiet(counts):
        return lambda t, n: sig(n, running=5, attainment=1.0, finished_rate=10.0, window_s=5.0, class_slo=counts)
    ds = run(CAPPED, ScalerState(4), quiet(ttft(batch=(1, 50), interactive=(50, 50))), 0, 900)
    assert ds[-1].replicas < 4
    ds = run(CAPPED, ScalerState(4), quiet(ttft(batch=(50, 50), interactive=(49, 50))), 0, 900)
    assert {x.replicas for x in ds} == {4} and "class interactive SLO attainment" in ds[-1].reason
    # The same with interactive's answers in time but streaming too slowly.
    slow = {"batch": ClassCounts(ttft=(50, 50)), "interactive": ClassCounts(ttft=(50, 50), tpot=(49, 50))}
    ds = run(CAPPED, ScalerState(4), quiet(slow), 0, 900)
    assert {x.replicas for x in ds} == {4} and "class interactive SLO attainment" in ds[-1].reason


def test_with_an_overflow_budget_a_class_s_misses_count_while_the_engines_queue():
    # The budget absorbs the engines' queues for the requests it sends away; a class's misses, measured at the
    # gateways over the requests kept local too, still add a replica while the engines queue.
    budget = replace(CAPPED, overflow_share=0.04)

    def at(counts, attainment=1.0, waiting=4):
        return sig(2, running=20, waiting=waiting, attainment=attainment, finished_rate=10.0, window_s=5.0,
                   class_slo=counts)
    misses = ttft(interactive=(40, 50))
    assert decide(ScalerState(2), at(misses), budget, 0).replicas == 3
    assert decide(ScalerState(2), at(misses, waiting=0), budget, 0).replicas == 2  # nothing waits: no shortage
    assert decide(ScalerState(2), at({}, attainment=0.8), budget, 0).replicas == 2  # the engines' misses: absorbed
    # TPOT misses count the same way.
    assert decide(ScalerState(2), at({"interactive": ClassCounts(ttft=(50, 50), tpot=(40, 50))}), budget,
                  0).replicas == 3
