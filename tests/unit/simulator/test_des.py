"""The discrete-event loop: determinism, cold starts, replica-hours, and the gateway's overflow rule."""

from dataclasses import replace

import pytest
from floodway.operator.autoscaler.baselines import StaticPolicy, decide_static
from floodway.operator.autoscaler.policy import ScaleDecision, decide
from floodway.operator.controller.scaling import default_policy
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.simulator import compare
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, Simulation, simulate
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.report import summarize, table
from floodway.operator.simulator.traces import idle_then_burst, steps

SMALL = ReplicaProfile(max_num_seqs=16)
CFG = SimConfig(profile=SMALL, cold_start_s=60.0)


def static(n):
    return Scaler(f"static-{n}", decide_static, StaticPolicy(n), n)


def test_deterministic_for_a_seed():
    tr = steps([2, 6, 3], step_s=120, seed=5)
    a, b = simulate(tr, static(2), CFG), simulate(tr, static(2), CFG)
    assert summarize(a) == summarize(b) and a.timeline == b.timeline


def test_static_replica_hours_and_full_service():
    tr = steps([3], step_s=600, seed=1)
    res = simulate(tr, static(3), CFG)
    assert res.replica_hours == pytest.approx(3 * res.duration_s / 3600)
    s = summarize(res)
    assert s.rejected == 0 and s.overflow_share == 0 and s.attainment > 0.99
    assert "static-3" in table([s], res.replica_hours)


def test_a_new_replica_is_ready_only_after_the_cold_start():
    def two_after_100(state, signals, policy, now):
        n = 2 if now >= 100 else 1
        return ScaleDecision(n, "test", replace(state, replicas=n))
    tr = steps([1], step_s=400, seed=2)
    res = simulate(tr, Scaler("t", two_after_100, StaticPolicy(1, interval_seconds=10), 1), CFG)
    ready = {p["t"]: p["ready"] for p in res.timeline}
    assert ready[150.0] == 1 and ready[170.0] == 2  # asked at t=100, cold start 60 s
    assert res.scale_events == 1


def test_no_replica_overflows_by_the_gateway_rule_or_rejects_without_overflow():
    tr = steps([2], step_s=60, seed=3)
    on = replace(CFG, overflow=OverflowPolicy(enabled=True))
    s = summarize(simulate(tr, static(0), on))
    assert s.overflow_share == 1.0 and s.attainment == 1.0  # the external API meets the SLO in the model
    off = summarize(simulate(tr, static(0), CFG))
    assert off.rejected == off.requests and off.attainment == 0


def test_queue_depth_overflow_spills_a_burst():
    tr = idle_then_burst(base_rate=1, burst_rate=40, duration_s=300, burst_at_s=100, burst_len_s=60, bursts=1)
    cfg = replace(CFG, overflow=OverflowPolicy(enabled=True, max_waiting_per_replica=2))
    s = summarize(simulate(tr, static(1), cfg))
    assert 0.2 < s.overflow_share < 0.9 and s.rejected == 0


def test_scale_from_zero_holds_the_first_requests_until_a_replica_is_ready():
    tr = idle_then_burst(base_rate=0.0001, burst_rate=2, duration_s=400, burst_at_s=50, burst_len_s=300, bursts=1)
    p = default_policy(replicas_min=0, scale_to_zero_after_seconds=600, target_concurrency=16)
    cfg = replace(CFG, overflow=OverflowPolicy(enabled=False, hold_timeout_s=120, hold_queue_size=1000))
    res = simulate(tr, Scaler("ours", decide, p, 0), cfg)
    assert res.reasons[0][1] == 1 and res.reasons[0][0] < 60
    s = summarize(res)
    assert s.rejected == 0 and s.ttft_p99 > 30  # the early requests waited out the cold start


def test_static_peak_is_the_smallest_pool_meeting_the_target():
    tr = steps([12], step_s=300, seed=4)
    n = compare.static_peak_replicas(tr, CFG, 0.99)
    assert summarize(simulate(tr, static(n), CFG)).attainment >= 0.99
    assert summarize(simulate(tr, static(n - 1), CFG)).attainment < 0.99
    with pytest.raises(ValueError, match="unknown policy"):
        compare.parse_policy("magic+overflow")


def test_counting_prefill_as_waiting_overflows_a_burst_sooner():
    # A large batch cap: the burst is admitted at once and queues in prefill, invisible to scraped waiting.
    tr = idle_then_burst(base_rate=0.2, burst_rate=30, duration_s=200, burst_at_s=100, burst_len_s=30, bursts=1)
    cfg = SimConfig(profile=ReplicaProfile(max_num_seqs=256), overflow=OverflowPolicy(enabled=True,
                                                                                     max_waiting_per_replica=2))
    scraped = summarize(simulate(tr, static(1), cfg))
    with_prefill = summarize(simulate(tr, static(1), replace(cfg, waiting_includes_prefill=True)))
    assert with_prefill.overflow_share > scraped.overflow_share
    assert with_prefill.ttft_p99 < scraped.ttft_p99


def test_predicting_ttft_from_the_prefill_backlog_overflows_what_would_miss_the_slo():
    # Long prompts arrive faster than one replica prefills them: they queue in prefill, where neither the
    # scraped waiting count nor the latency average sees them before TTFT is missed.
    tr = steps([3.0], step_s=120, prompt_tokens=6000, output_tokens=20, seed=2)
    cfg = SimConfig(profile=ReplicaProfile(max_num_seqs=256), ttft_slo_s=1.0, tpot_slo_s=1.0,
                    overflow=OverflowPolicy(enabled=True, ttft_slo_s=1.0, predicted_ttft_factor=0.7))
    average = summarize(simulate(tr, static(1), replace(cfg, ttft_from_prefill_backlog=False)))
    backlog = summarize(simulate(tr, static(1), cfg))
    assert backlog.attainment > average.attainment and backlog.attainment >= 0.99
    assert 0 < backlog.overflow_share < 1
    # As the gateway predicts for a runtime that exports no prefill rate: the backlog at the rate earlier answers
    # showed up to their first token, learned from the answers (none before the first).
    sim = Simulation(tr, static(1), replace(cfg, learned_prefill_rate=True))
    learned = summarize(sim.run())
    assert learned.attainment > average.attainment and 0 < learned.overflow_share < 1
    rate = SimConfig().profile.prefill_tokens_per_s
    assert 0.5 * rate < sim.gateway.prefill_rate <= rate


def test_the_simulated_gateway_counts_each_request_by_the_pool_that_would_have_kept_it_local():
    # One replica and long prompts faster than it prefills (as above): the gateway's floodway_gateway_replicas_needed,
    # as the autoscaler scrapes it, counts each arrival it predicted once; those needing more than the one replica
    # are among the overflowed (the rule overflows every one of them), the rest needed at most it.
    tr = steps([3.0], step_s=120, prompt_tokens=6000, output_tokens=20, seed=2)
    cfg = SimConfig(profile=ReplicaProfile(max_num_seqs=256), ttft_slo_s=1.0, tpot_slo_s=1.0,
                    overflow=OverflowPolicy(enabled=True, ttft_slo_s=1.0, predicted_ttft_factor=0.7))
    sim = Simulation(tr, static(1), cfg)
    res = sim.run()
    needed, inf = sim.gateway.needed, float("inf")
    overflowed = sum(r.where == "overflow" for r in res.requests)
    assert 0.9 * len(tr) <= needed[inf] <= len(tr)  # all but those before the replica had timed a prefill
    assert 0 < needed[inf] - needed[1] <= overflowed
    assert 0 < sim.last_scrape.gateway.replicas_needed[inf] <= needed[inf]  # what the ticks scraped
