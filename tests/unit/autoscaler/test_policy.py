"""Our policy's behaviour: panic, stability, SLO guard, bounds, scale from and to zero."""

import random
from dataclasses import replace

import pytest
from floodway.operator.autoscaler.policy import ScalerState, decide, prefill_rate_needed
from floodway.operator.controller.scaling import default_policy

from tests.unit.autoscaler.conftest import TOKENS, P, run, sig


def test_steady_load_holds():
    ds = run(P, ScalerState(2), lambda t, n: sig(n, running=15, attainment=1.0), 0, 600)
    assert {d.replicas for d in ds} == {2}


def test_panic_on_2x_burst_jumps_past_the_step_limit_and_blocks_scale_down():
    state = run(P, ScalerState(2), lambda t, n: sig(2, running=15, attainment=1.0), 0, 300)[-1].state
    d = decide(state, sig(2, running=20, waiting=60, attainment=1.0), P, 305)
    assert d.replicas == 8 > 2 + P.max_scale_up_step
    assert d.reason.startswith("panic")
    # Demand falls right after: no scale-down while the panic holds.
    after = run(P, d.state, lambda t, n: sig(8, running=5, attainment=1.0), 310, 305 + P.panic_hold_seconds - 1)
    assert {x.replicas for x in after} == {8}


def test_requests_in_flight_within_the_tolerance_add_no_replica_prompt_tokens_do():
    state = ScalerState(3)
    assert decide(state, sig(3, running=32, attainment=1.0), P, 0).replicas == 3  # 32 of 30: within 10%
    assert decide(state, sig(3, running=34, attainment=1.0), P, 0).replicas == 4
    # Prompt tokens just over 3 replicas' prefill (sized with headroom already) add one at once.
    tokens = replace(P, prefill_tokens_per_second=1000.0, prefill_target=1.0, slo_ttft_ms=0.0)
    over = sig(3, running=3, attainment=1.0, prompt_token_rate=3100.0, window_s=5.0)
    assert decide(state, over, tokens, 0).replicas == 4
    with pytest.raises(ValueError, match="scale_up_tolerance"):
        default_policy(scale_up_tolerance=-0.1)


def test_below_2x_is_not_panic_and_obeys_the_step_limit():
    p = default_policy(replicas_max=20, target_concurrency=10, max_scale_up_step=2, scale_up_window_seconds=1)
    d = decide(ScalerState(4), sig(4, running=40, waiting=30, attainment=1.0), p, 0)
    assert not d.reason.startswith("panic")
    assert d.replicas == 6


def test_no_flapping_on_noise():
    rng = random.Random(1)
    # Demand wanders +-30% around 2.5 replicas' worth for an hour.
    ds = run(P, ScalerState(3), lambda t, n: sig(n, running=25 * rng.uniform(0.7, 1.3), attainment=1.0), 0, 3600)
    changes = sum(1 for a, b in zip(ds, ds[1:], strict=False) if a.replicas != b.replicas)
    assert changes <= 2, [d.reason for d in ds if not d.reason.startswith("hold")]


def test_scales_down_after_the_stabilization_window_one_step_at_a_time():
    ds = run(P, ScalerState(6), lambda t, n: sig(n, running=10, attainment=1.0), 0, 600)
    first_drop = next(i for i, d in enumerate(ds) if d.replicas < 6)
    assert first_drop * P.interval_seconds >= P.scale_down_stabilization_seconds
    assert all(a.replicas - b.replicas <= 1 for a, b in zip(ds, ds[1:], strict=False))
    # Each step down waits scale_down_interval_seconds to see the smaller pool's load.
    drops = [i * P.interval_seconds for i, (a, b) in enumerate(zip(ds, ds[1:], strict=False))
             if b.replicas < a.replicas]
    assert min(b - a for a, b in zip(drops, drops[1:], strict=False)) >= P.scale_down_interval_seconds
    assert ds[-1].replicas == 2  # 10 in flight fits 2 replicas at 70% of target 10
    assert next(d.reason for d in ds if d.replicas < 6) == \
        f"scale down: peak demand 10.0 over {P.scale_down_stabilization_seconds:g} s fits 2 replicas"


def test_no_scale_down_while_attainment_is_below_target():
    ds = run(P, ScalerState(6), lambda t, n: sig(n, running=5, attainment=0.95), 0, 900)
    assert {d.replicas for d in ds} == {6}
    assert "below target" in ds[-1].reason


def test_slo_miss_while_queued_adds_a_replica_unless_one_is_starting():
    state = ScalerState(3)
    d = decide(state, sig(3, running=20, waiting=2, attainment=0.9), P, 0)
    assert d.replicas == 4 and "SLO attainment" in d.reason
    d = decide(state, sig(3, running=20, waiting=2, attainment=0.9, starting=1), P, 0)
    assert d.replicas == 3


def test_a_replica_slo_feedback_added_is_held_for_the_stabilization_window():
    # Observed for a window at 3 replicas, then one tick short of the SLO while queued adds a fourth; the next
    # ticks' demand (10 in flight) fits two and attainment is back at target, as on spiky seed 0 where each such
    # replica was dropped before it was ready.
    start = run(P, ScalerState(3), lambda t, n: sig(n, running=15, attainment=1.0), 0, 300)[-1].state
    assert start.replicas == 3
    d = decide(start, sig(3, running=20, waiting=2, attainment=0.9), P, 305)
    assert d.replicas == 4 and "SLO attainment" in d.reason
    after = run(P, d.state, lambda t, n: sig(n, running=10, attainment=1.0), 310, 305 + 600)
    held = [x for i, x in enumerate(after) if 310 + i * P.interval_seconds < 305 + P.scale_down_stabilization_seconds]
    assert {x.replicas for x in held} == {4}
    assert "SLO feedback" in held[-1].reason
    assert after[-1].replicas == 2  # then scale-down resumes, one step at a time


def test_bounds_are_respected():
    p = default_policy(replicas_min=2, replicas_max=5, target_concurrency=10)
    assert decide(ScalerState(3), sig(3, running=30, waiting=900), p, 0).replicas == 5
    ds = run(p, ScalerState(5), lambda t, n: sig(n, attainment=1.0), 0, 3600)
    assert min(d.replicas for d in ds) == 2
    assert decide(ScalerState(9), sig(9, running=1), p, 0).replicas == 5
    assert decide(ScalerState(0), sig(0), p, 0).replicas == 2


def test_scale_from_zero_on_the_first_queued_request():
    p = default_policy(replicas_min=0, target_concurrency=10, scale_to_zero_after_seconds=300)
    assert decide(ScalerState(0), sig(0), p, 0).replicas == 0
    d = decide(ScalerState(0), sig(0, held=1), p, 5)
    assert d.replicas == 1 and d.reason.startswith("panic")
    # Overflowed traffic alone (nothing held) also wakes the pool.
    assert decide(ScalerState(0), sig(0, overflow_rate=0.2), p, 5).replicas == 1
    # With an overflow budget too: no ready replica is always a shortage.
    assert decide(ScalerState(0), sig(0, held=1), replace(p, overflow_share=0.05), 5).replicas == 1


def test_scale_to_zero_only_after_the_idle_period():
    p = default_policy(replicas_min=0, target_concurrency=10, scale_to_zero_after_seconds=600,
                         scale_down_stabilization_seconds=60)
    state = decide(ScalerState(1), sig(1, running=3, attainment=1.0), p, 0).state
    ds = run(p, state, lambda t, n: sig(n, attainment=None), 5, 900)
    zero_at = next(i for i, d in enumerate(ds) if d.replicas == 0) * p.interval_seconds + 5
    assert 600 <= zero_at < 700
    assert "scale to zero" in next(d.reason for d in ds if d.replicas == 0)


def test_kv_pressure_scales_up():
    d = decide(ScalerState(2), sig(2, running=4, attainment=1.0, kv_usage=(0.95, 0.95)), P, 0)
    assert d.replicas == 3 and "KV" in d.reason


def test_kv_pressure_counts_its_average_over_the_scale_up_window():
    # A tick of long prompts filling the cache (1.9 of 2 replicas) among ticks at 1.2 is gone before a replica
    # starts: the window's average (1.3) fits two at kv_cache_target. KV held there scales up.
    low = sig(2, running=4, attainment=1.0, kv_usage=(0.6, 0.6))
    state = run(P, ScalerState(2), lambda t, n: low, 0, 50)[-1].state
    spike = decide(state, sig(2, running=4, attainment=1.0, kv_usage=(0.95, 0.95)), P, 55)
    assert spike.replicas == 2
    held = run(P, spike.state, lambda t, n: sig(2, running=4, attainment=1.0, kv_usage=(0.95, 0.95)), 60, 120)
    up = next(d for d in held if d.replicas == 3)
    assert "KV" in up.reason and up is not held[0]


def test_scale_down_needs_the_kv_usage_averaged_as_for_a_scale_up_to_fit():
    # 1.5 of KV summed over 3 replicas needs 3 at kv_cache_target x scale_down_utilization (0.595 each). One tick's
    # dip to 1.0 would fit 2, but not the minute's average: it holds (on Mooncake seed 2 such a tick dropped a replica
    # that the average added back within a minute, three times in an hour). A minute at 1.0 steps down.
    at = lambda kv: lambda t, n: sig(n, running=4, attainment=1.0, kv_usage=(kv / n,) * n)  # noqa: E731
    state = run(P, ScalerState(3), at(1.5), 0, 300)[-1].state
    assert state.replicas == 3
    dip = decide(state, at(1.0)(305, 3), P, 305)
    assert dip.replicas == 3
    low = run(P, dip.state, at(1.0), 310, 400)
    assert low[-1].replicas == 2 and "scale down" in next(d.reason for d in low if d.replicas == 2)


def test_overflow_counts_as_demand():
    # 2 req/s overflowed at ~10 s each is ~20 requests in flight elsewhere: two more replicas' worth.
    s = sig(2, running=18, attainment=1.0, finished_rate=1.8, overflow_rate=2.0)
    assert decide(ScalerState(2), s, P, 0).replicas == 4


@pytest.mark.parametrize("kw, word", [({"replicas_min": 3, "replicas_max": 2}, "replicas_min"),
                                      ({"target_concurrency": 0}, "target_concurrency"),
                                      ({"slo_attainment": 1.5}, "slo_attainment"),
                                      ({"max_scale_down_step": 0}, "max_scale_down_step"),
                                      ({"overflow_share": 1.0}, "overflow_share"),
                                      ({"overflow_budget_window_s": 0}, "overflow_budget_window_s"),
                                      ({"slo_noise_z": -1}, "slo_noise_z")])
def test_bad_policy_is_rejected(kw, word):
    with pytest.raises(ValueError, match=word):
        default_policy(**kw)


def test_slo_feedback_ignores_a_shortfall_within_sampling_noise():
    # 100 requests in the window: a pool exactly at 99% shows 0.99 +- 0.00995, so 0.985 is noise and 0.97 is not.
    state, load = ScalerState(3), dict(running=20, waiting=2, finished_rate=10.0, window_s=10.0)
    assert decide(state, sig(3, attainment=0.985, **load), P, 0).replicas == 3
    assert decide(state, sig(3, attainment=0.97, **load), P, 0).replicas == 4
    # With the noise filter off, any shortfall counts; with few requests finished, noise is wide.
    assert decide(state, sig(3, attainment=0.985, **load), replace(P, slo_noise_z=0.0), 0).replicas == 4
    few = dict(load, finished_rate=1.0)  # 10 requests: one miss (0.9) is within 3 standard errors of 0.99
    assert decide(state, sig(3, attainment=0.9, **few), replace(P, slo_noise_z=3.0), 0).replicas == 3
    # The default two: 18 requests in a tick (spiky seed 3 after its first burst), one miss (0.944) is 1.94
    # standard errors below 0.99 and holds; two (0.889) add a replica.
    tick = dict(load, finished_rate=3.6, window_s=5.0)
    assert decide(state, sig(3, attainment=17 / 18, **tick), P, 0).replicas == 3
    assert decide(state, sig(3, attainment=16 / 18, **tick), P, 0).replicas == 4
    # The noise filter only gates scale-up: scale-down still waits for attainment at target.
    ds = run(P, ScalerState(6), lambda t, n: sig(n, running=5, attainment=0.985, finished_rate=10.0, window_s=10.0),
             0, 900)
    assert [d.replicas for d in ds] == [6] * len(ds)


def test_prompt_tokens_count_as_demand_when_requests_in_flight_do_not_show_it():
    # 2k-token prompts with short answers: 4 requests in flight, but 20k prompt tokens/s arrive, 4 replicas' worth.
    load = dict(running=4, attainment=1.0, prompt_token_rate=20_000.0, window_s=5.0)
    assert decide(ScalerState(1), sig(1, **load), P, 0).replicas == 1  # in requests: one replica is plenty
    d = decide(ScalerState(1), sig(1, **load), TOKENS, 0)
    assert d.replicas == 4 and d.reason.startswith("panic")  # 4x one replica's prefill: past the panic threshold
    steady = run(TOKENS, ScalerState(4), lambda t, n: sig(n, **load), 0, 900)
    assert {x.replicas for x in steady} == {4}


def test_token_demand_scales_down_only_with_the_utilization_margin():
    # Hysteresis: scale up at 1 replica's worth per replica, down only when the stabilization window's peak fits
    # the smaller pool at scale_down_utilization (0.7): 3 replicas take at most 2.1 replicas' worth (10.5k/s).
    def at(rate):
        return run(TOKENS, ScalerState(4), lambda t, n: sig(n, running=2, attainment=1.0, prompt_token_rate=rate,
                                                            window_s=5.0), 0, 1200)
    assert {d.replicas for d in at(16_000.0)} == {4}
    assert {d.replicas for d in at(12_000.0)} == {4}
    ds = at(10_000.0)  # 2 replicas' worth fits 3 x 0.7 but not 2 x 0.7: one step down, then it holds
    assert ds[-1].replicas == 3 and min(d.replicas for d in ds) == 3


def test_no_flapping_on_noisy_token_demand():
    rng = random.Random(2)
    # Prompt tokens/s wander +-40% around 2.5 replicas' worth, as 5 s windows of bursty traffic do.
    ds = run(TOKENS, ScalerState(3), lambda t, n: sig(n, running=3, attainment=1.0,
                                                      prompt_token_rate=12_500 * rng.uniform(0.6, 1.4), window_s=5.0),
             0, 3600)
    changes = sum(1 for a, b in zip(ds, ds[1:], strict=False) if a.replicas != b.replicas)
    assert changes <= 2, [d.reason for d in ds if not d.reason.startswith("hold")]


def test_the_last_bursts_of_prompt_tokens_hold_the_pool_for_the_token_stabilization_window():
    # A 20 s burst of 4 replicas' worth of prompt tokens every 5 minutes, near silence between: bursts come and go
    # faster than a cold start, so the pool keeps what the last ones needed instead of shrinking between them.
    def load(t, n):
        burst = t % 300 < 20
        return sig(n, running=2, attainment=1.0, prompt_token_rate=20_000.0 if burst else 100.0, window_s=5.0)
    ds = run(TOKENS, ScalerState(1), load, 0, 3600)
    assert max(d.replicas for d in ds) >= 4
    first = next(i for i, d in enumerate(ds) if d.replicas >= 4)
    assert min(d.replicas for d in ds[first:]) >= 4  # held through every quiet spell
    changes = sum(1 for a, b in zip(ds, ds[1:], strict=False) if a.replicas != b.replicas)
    assert changes <= 3
    # Without bursts for longer than token_stabilization_s it steps down.
    quiet = run(TOKENS, ds[-1].state, lambda t, n: sig(n, running=2, attainment=1.0, prompt_token_rate=100.0,
                                                       window_s=5.0),
                3605, 3605 + TOKENS.token_stabilization_s + 300)
    assert quiet[-1].replicas < 4


def test_prefill_rate_needed_clears_every_span_within_its_length_plus_the_slack():
    ticks = [(5.0, 0.0)] * 11 + [(5.0, 100_000.0)]  # a minute with one 5 s burst of 100k prompt tokens at its end
    assert prefill_rate_needed(ticks, 0.0) == 20_000.0  # no slack: the burst's own rate
    assert prefill_rate_needed(ticks, 5.0) == 10_000.0  # a 5 s slack: the burst spread over 10 s
    steady = [(5.0, 50_000.0)] * 12  # 10k/s for a minute: the longest span counts, near the mean
    assert prefill_rate_needed(steady, 0.0) == 10_000.0
    assert prefill_rate_needed(steady, 5.0) == pytest.approx(10_000.0 * 60 / 65)
    assert prefill_rate_needed([], 5.0) == 0.0


def test_the_ttft_slo_lets_a_burst_of_prompt_tokens_wait_in_whole_decision_intervals():
    # One 5 s tick of 40k prompt tokens/s (8 replicas' worth at half of 10k/s each) after a quiet minute.
    def burst_tick(p):
        state = run(p, ScalerState(1), lambda t, n: sig(n, running=2, attainment=1.0, prompt_token_rate=100.0,
                                                        window_s=5.0), 0, 60)[-1].state
        return decide(state, sig(1, running=2, attainment=1.0, prompt_token_rate=40_000.0, window_s=5.0), p, 65)
    half = burst_tick(replace(TOKENS, slo_ttft_ms=500.0))  # 0.5 s: no whole interval of slack, sized as before
    assert half.replicas == 8 and "demand 80.0" in half.reason
    assert burst_tick(replace(TOKENS, slo_ttft_ms=0.0)).replicas == 8
    # 5 s: the burst may wait one interval (spread over 10 s: 20k/s), and the slack absorbs what the tick's rate
    # hides, so a replica counts its whole 10k/s: 2 replicas.
    five = burst_tick(replace(TOKENS, slo_ttft_ms=5000.0))
    assert five.replicas == 2 and "demand 20.0" in five.reason
