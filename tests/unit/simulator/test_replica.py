"""The continuous-batching replica model against hand-computed step times."""

import json

import pytest
from floodway.operator.simulator.replica import Replica, ReplicaProfile, SimRequest

PROFILE = ReplicaProfile(prefill_tokens_per_s=10_000, decode_step_s={1: 0.01, 8: 0.02, 32: 0.05},
                         kv_capacity_tokens=10_000, max_num_seqs=8, max_num_batched_tokens=1000,
                         decode_s_per_kv_token=0.0)


def replica(profile=PROFILE):
    done = []
    return Replica(profile, 0.0, done.append), done


def test_decode_step_interpolates_and_extrapolates_flat_below():
    assert PROFILE.decode_step(1) == 0.01
    assert PROFILE.decode_step(8) == 0.02
    assert PROFILE.decode_step(20) == pytest.approx(0.035)
    assert PROFILE.decode_step(32) == 0.05


def test_single_request_ttft_and_tpot():
    rep, done = replica()
    rep.submit(SimRequest(0.0, 2500, 11), 0.0)
    rep.advance_to(100.0)
    (r,) = done
    # Prefill in chunks of 1000 tokens (0.1 s each): 3 steps, the last one a 500-token chunk.
    assert r.first_token_s == pytest.approx(0.25)
    assert (r.finish_s - r.first_token_s) / 10 == pytest.approx(0.01)
    assert rep.kv_used == 0 and not rep.busy


def test_batched_decode_uses_the_batch_step_time():
    rep, done = replica()
    for _i in range(8):
        rep.submit(SimRequest(0.0, 10, 101), 0.0)
    rep.advance_to(100.0)
    assert len(done) == 8
    tpots = {round((r.finish_s - r.first_token_s) / 100, 6) for r in done}
    assert tpots == {0.02}


def test_batch_cap_and_kv_capacity_make_requests_wait():
    rep, _ = replica()
    for _ in range(10):
        rep.submit(SimRequest(0.0, 10, 50), 0.0)
    assert (rep.running, rep.waiting) == (8, 2)
    rep2, _ = replica()
    for _ in range(3):
        rep2.submit(SimRequest(0.0, 3000, 1000), 0.0)
    assert (rep2.running, rep2.waiting) == (2, 1)
    assert rep2.kv_usage == pytest.approx(0.8)
    assert not rep2.fits(SimRequest(0.0, 9500, 1000))


def test_arrivals_join_at_the_next_step_boundary():
    rep, done = replica()
    rep.submit(SimRequest(0.0, 10, 1000), 0.0)
    rep.submit(SimRequest(0.333, 10, 2), 0.333)
    assert rep.now >= 0.333
    rep.advance_to(50)
    late = next(r for r in done if r.arrival_s == 0.333)
    assert late.first_token_s - 0.333 < 0.02


def test_profile_from_json(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": "m", "prefill_tokens_per_s": 5000, "decode_step_s": {"1": 0.02, "8": 0.03},
                                "kv_capacity_tokens": 1000, "max_num_seqs": 4}))
    p = ReplicaProfile.from_json(path)
    assert p.decode_step(8) == 0.03 and p.max_num_seqs == 4 and p.model == "m"
    assert p.decode_s_per_kv_token == 0.0


def test_profile_as_bench_engine_writes_it(tmp_path):
    # The keys `floodway bench engine --profile-out` writes (engine/bench/engine_profile.py), extras included.
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({
        "model": "floodway/llama-150m", "prefill_tokens_per_s": 1800.5, "decode_step_s": {"1": 0.03, "8": 0.05,
                                                                                          "32": 0.11, "64": 0.2},
        "decode_context_tokens": 256, "kv_capacity_tokens": 32768, "max_num_seqs": 64, "block_size": 16,
        "max_num_batched_tokens": 2048, "device": "cpu", "dtype": "float32"}))
    p = ReplicaProfile.from_json(path)
    assert (p.kv_capacity_tokens, p.max_num_batched_tokens, p.decode_step(64)) == (32768, 2048, 0.2)
    rep, done = replica(p)
    rep.submit(SimRequest(0.0, 100, 3), 0.0)
    rep.advance_to(10)
    assert done[0].first_token_s == pytest.approx(100 / 1800.5)
    path.write_text(json.dumps({"prefill_tokens_per_s": -1}))
    with pytest.raises(ValueError, match="prefill_tokens_per_s must be > 0"):
        ReplicaProfile.from_json(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="cannot read replica profile"):
        ReplicaProfile.from_json(path)


def test_the_replica_exports_the_prefill_rate_the_engine_would_from_its_modelled_steps():
    """The engine's StepTimes fed the modelled steps. Beside one decode a step is 10 ms plus the 350 prefill
    tokens the TPOT budget at a 50 ms SLO leaves (at 10k tok/s): 350 tokens per 45 ms, which the engine reads
    exactly from such steps."""
    rep = Replica(PROFILE, 0.0, lambda r: None, 0.05)
    assert rep.prefill_rate is None  # no prefill timed: the gateway falls back to its learned rate
    rep.submit(SimRequest(0.0, 10, 200), 0.0)  # decodes throughout
    rep.submit(SimRequest(0.05, 8000, 2), 0.05)  # a long prompt prefills in budgeted steps beside it
    rep.advance_to(0.6)
    assert rep.step_times.decode_s == pytest.approx(0.01)
    assert rep.step_times.s_per_prefill_token == pytest.approx(1e-4)
    assert rep.prefill_rate == pytest.approx(350 / 0.045, rel=0.01)  # the budget floors to whole tokens
    # The model's prefill-only steps have no fixed part, which the engine's estimate takes to be a decode-only
    # step's time: it reads them as 1000 tokens in 90 ms beyond it, so the rate beside decodes comes out high.
    rep.submit(SimRequest(10.0, 5000, 1), 10.0)
    rep.advance_to(100.0)
    assert 350 / 0.045 < rep.prefill_rate < 1.15 * 350 / 0.045


def test_prefill_budget_keeps_a_decoding_requests_tpot_while_a_long_prompt_prefills():
    def run(tpot_slo_s):
        done = []
        rep = Replica(PROFILE, 0.0, done.append, tpot_slo_s)
        rep.submit(SimRequest(0.0, 10, 11), 0.0)  # decodes from the first step on
        rep.submit(SimRequest(0.01, 8000, 2), 0.01)  # 8000 prompt tokens arrive while it decodes
        rep.advance_to(100.0)
        short, long_ = sorted(done, key=lambda r: r.prompt)
        return (short.finish_s - short.first_token_s) / 10, long_.first_token_s - long_.arrival_s
    tpot_off, ttft_off = run(None)
    tpot_on, ttft_on = run(0.05)
    # Without a budget each step beside the decode carries ~1000 prefill tokens (0.1 s): TPOT ~1.8x the SLO.
    assert tpot_off > 1.5 * 0.05
    # With one, a step carries (0.9 x 50 ms - 10 ms) x 10k tok/s = 350 prefill tokens: 45 ms steps.
    assert tpot_on <= 0.05
    # The same prefill work spread over more steps: in this linear step-cost model the long prompt's first
    # token comes no later, since the decode step runs beside its chunks either way.
    assert ttft_on == pytest.approx(ttft_off, rel=0.05)
