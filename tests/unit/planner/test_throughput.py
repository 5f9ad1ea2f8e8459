"""Decode/prefill bounds, the engine profile, and a replica's capacity within the SLO (hand-computed cases)."""

import json

import pytest
from floodway.operator.planner.gpus import find_gpu
from floodway.operator.planner.memory import plan_memory
from floodway.operator.planner.model_shape import load_shape, moe_weight_fraction, shape_from_config
from floodway.operator.planner.throughput import (
    Speed,
    bound_speed,
    load_profile,
    profile_speed,
    replica_capacity,
    replicas_for,
)
from floodway.operator.planner.units import PlanError

PROFILE = {"model": "floodway/tiny-llama", "prefill_tokens_per_s": 10000.0,
           "decode_step_s": {"1": 0.011, "8": 0.018, "32": 0.042}, "kv_capacity_tokens": 20000, "max_num_seqs": 64}


def linear_speed(batch_cap=None):
    # prefill 10,000 tokens/s; a decode step takes 10 ms + 1 ms per sequence
    return Speed("test", 10000.0, lambda b: 0.010 + 0.001 * b, batch_cap)


def test_capacity_at_saturation():
    cap = replica_capacity(linear_speed(), prompt_tokens=1000, output_tokens=100, max_batch=8, limited_by="x")
    # prefill 0.1 s; step(8) = 18 ms; per request 0.1 + 100 x 0.018 / 8 = 0.325 s of replica time
    assert cap.batch == 8 and cap.limited_by == "x"
    assert cap.step_s == pytest.approx(0.018) and cap.ttft_s == pytest.approx(0.1)
    assert cap.requests_per_s == pytest.approx(1 / 0.325)
    assert cap.output_tokens_per_s == pytest.approx(100 / 0.325)
    assert cap.tpot_s == pytest.approx(0.018 + 8 * 0.1 / 100)  # 26 ms: decode step + interleaved prefills
    assert cap.meets_ttft is None and cap.meets_tpot is None
    assert replicas_for(10, cap) == 4  # 10 / 3.08 -> 4


def test_tpot_slo_caps_the_batch():
    cap = replica_capacity(linear_speed(), 1000, 100, max_batch=8, limited_by="x", slo_tpot_s=0.020,
                           slo_ttft_s=0.05)
    # tpot(b) = 10 ms + 1 ms b + 1 ms b <= 20 ms  ->  b = 5; per request 0.1 + 100 x 0.015 / 5 = 0.4 s
    assert (cap.batch, cap.limited_by) == (5, "TPOT SLO")
    assert cap.requests_per_s == pytest.approx(2.5) and cap.tpot_s == pytest.approx(0.020)
    assert cap.meets_tpot is True and cap.meets_ttft is False  # a 1000-token prefill takes 100 ms
    unreachable = replica_capacity(linear_speed(), 1000, 100, 8, "x", slo_tpot_s=0.001)
    assert unreachable.batch == 1 and unreachable.meets_tpot is False


def test_profile_caps_batch_by_its_kv_capacity():
    cap = replica_capacity(linear_speed(lambda tokens: 20000 // tokens), 1000, 100, max_batch=64, limited_by="x")
    assert cap.batch == 18 and "profiled engine" in cap.limited_by  # 20,000 // 1,100


def write(tmp_path, data) -> str:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_round_trip_uses_the_simulators_step_model(tmp_path):
    profile, raw = load_profile(write(tmp_path, {**PROFILE, "decode_s_per_kv_token": 1e-7}))
    assert profile.decode_step_s == {1: 0.011, 8: 0.018, 32: 0.042} and raw["model"] == PROFILE["model"]
    speed = profile_speed(profile, context_tokens=100)
    # between measured points the step is interpolated (14 ms at batch 4); each sequence reads 100 KV tokens
    assert speed.source == "profile" and speed.step_s(4) == pytest.approx(0.014 + 4 * 100 * 1e-7)
    assert speed.step_s(64) == pytest.approx(0.074 + 64 * 100 * 1e-7)  # the last slope continues
    assert speed.batch_cap(1000) == 20 and speed.batch_cap(100) == 64


def test_a_bench_profile_adds_no_kv_term(tmp_path):
    # `floodway bench engine` measures steps at a real context, so (as in the simulator) no KV term is added
    profile, _ = load_profile(write(tmp_path, {**PROFILE, "decode_context_tokens": 256}))
    assert profile.decode_s_per_kv_token == 0.0
    assert profile_speed(profile, context_tokens=5000).step_s(8) == pytest.approx(0.018)


@pytest.mark.parametrize("change,message", [
    ({"decode_step_s": None}, "missing decode_step_s"),
    ({"kv_capacity_tokens": None, "model": None}, "missing model, kv_capacity_tokens"),
    ({"prefill_tokens_per_s": "fast"}, "profile .*: "),
    ({"decode_step_s": {"0": 0.01}}, "batch sizes >= 1"),
    ({"decode_step_s": {"1": -1}}, "positive step times"),
    ({"max_num_seqs": 0}, "max_num_seqs must be > 0"),
])
def test_bad_profiles(tmp_path, change, message):
    data = {k: v for k, v in {**PROFILE, **change}.items() if v is not None}
    with pytest.raises(PlanError, match=message):
        load_profile(write(tmp_path, data))


def test_unreadable_profile(tmp_path):
    with pytest.raises(PlanError, match="cannot read"):
        load_profile(str(tmp_path / "missing.json"))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(PlanError, match="not a JSON object"):
        load_profile(str(tmp_path / "list.json"))


def test_bounds_batch1_step_is_weights_over_bandwidth(llama2_7b):
    shape = load_shape(llama2_7b)
    a100 = find_gpu("a100-80gb")
    mem = plan_memory(shape, a100, max_model_len=4096, max_num_seqs=16)
    speed = bound_speed(shape, mem, a100, gpus=1, context_tokens=0)
    assert speed.step_s(1) == pytest.approx(mem.weight_bytes / 2.039e12)
    # 2 FLOPs per parameter per token: prefill at 312 TFLOP/s runs 23,150 tokens/s
    assert speed.prefill_tokens_per_s == pytest.approx(312e12 / (2 * 6_738_415_616))
    # with a 1000-token context every sequence also reads 1000 x 512 KiB of KV per step
    with_kv = bound_speed(shape, mem, a100, gpus=1, context_tokens=1000)
    assert with_kv.step_s(4) == pytest.approx((mem.weight_bytes + 4 * 1000 * 524_288) / 2.039e12)


def test_mixture_of_experts_reads_fewer_weights_at_small_batch(configs):
    shape = shape_from_config(configs["mixtral-8x7b"], "m", "t")
    assert moe_weight_fraction(shape, 1) == pytest.approx(shape.active_params / shape.params)
    assert moe_weight_fraction(shape, 1) < moe_weight_fraction(shape, 2) < moe_weight_fraction(shape, 64)
    assert moe_weight_fraction(shape, 64) == pytest.approx(1.0, abs=1e-3)
    assert moe_weight_fraction(shape_from_config(configs["llama2-7b"], "d", "t"), 1) == 1.0


def test_bad_workloads():
    with pytest.raises(PlanError, match="must be >= 1"):
        replica_capacity(linear_speed(), 0, 10, 8, "x")
    with pytest.raises(PlanError, match="not even one sequence"):
        replica_capacity(linear_speed(), 10, 10, 0, "KV cache")
    with pytest.raises(PlanError, match="rate must not be negative"):
        replicas_for(-1, replica_capacity(linear_speed(), 10, 10, 1, "x"))
