"""The worked figures of the sizing guides, reproduced exactly (issue 9's 'done when')."""

import pytest
from floodway.operator.planner.gpus import find_gpu
from floodway.operator.planner.memory import kv_bytes, kv_bytes_per_token, weight_bytes
from floodway.operator.planner.model_shape import load_shape, shape_from_config
from floodway.operator.planner.throughput import decode_ceiling_tokens_per_s

GIB = 2**30


def test_llama2_7b_kv_per_sequence_and_batch(llama2_7b):
    shape = load_shape(llama2_7b)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (32, 32, 128)
    assert kv_bytes_per_token(shape, "float16") == 524_288  # 2 x 32 x 32 x 128 x 2
    assert kv_bytes(shape, "float16", 4096) == 2_147_483_648  # 2 GiB per request
    assert kv_bytes(shape, "float16", 4096, batch=16) == 32 * GIB


def test_gqa_with_8_kv_heads_cuts_kv_by_4(configs):
    mha = shape_from_config(configs["llama2-7b"], "mha", "test")
    gqa = shape_from_config({**configs["llama2-7b"], "num_key_value_heads": 8}, "gqa", "test")
    assert kv_bytes(mha, "float16", 4096) == 4 * kv_bytes(gqa, "float16", 4096)
    assert kv_bytes(gqa, "float16", 4096) == 512 * 2**20
    assert gqa.params < mha.params  # the K and V projections shrink too


@pytest.mark.parametrize("precision,gb", [("float32", 28), ("bfloat16", 14), ("float16", 14), ("int8", 7),
                                          ("fp8", 7), ("int4", 3.5)])
def test_7b_weights_by_precision(precision, gb, llama2_7b):
    assert weight_bytes(7_000_000_000, precision) == gb * 10**9
    assert weight_bytes(load_shape(llama2_7b, params=7e9).params, precision) == gb * 10**9


def test_a100_bandwidth_over_14gb_is_about_140_tokens_per_s():
    ceiling = decode_ceiling_tokens_per_s(2e12, 14 * 10**9)
    assert ceiling == pytest.approx(142.857, abs=1e-3)
    a100 = find_gpu("a100-80gb")
    assert decode_ceiling_tokens_per_s(a100.bandwidth_bytes_per_s, 14 * 10**9) == pytest.approx(145.64, abs=0.01)


@pytest.mark.parametrize("name,total,active", [
    ("llama2-7b", 6_738_415_616, 6_738_415_616),
    ("llama3-8b", 8_030_261_248, 8_030_261_248),
    ("qwen2.5-7b", 7_615_616_512, 7_615_616_512),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("gpt2", 124_439_808, 124_439_808),
])
def test_parameter_estimate_matches_published_counts(configs, name, total, active):
    shape = shape_from_config(configs[name], name, "test")
    assert (shape.params, shape.active_params) == (total, active)
    assert shape.params_source == "estimated from config.json"
