"""The admission check the operator calls: ok, warning (fewer full-length sequences fit than maxNumSeqs),
refuse (the weights or one sequence do not fit), and 'not checked' where it cannot know."""

import re

import pytest
from floodway.operator.planner.fit import check_fit

GIB = 2**30
# Llama-2-7B in float16 on one A100-40GB at utilisation 0.9, keeping max(1 GiB, 5%) = 2 GiB for activations:
BUDGET = int(40 * GIB * 0.9)  # 38,654,705,664
WEIGHTS = 6_738_415_616 * 2  # 13,476,831,232
POOL = BUDGET - WEIGHTS - 2 * GIB  # 23,030,390,784 = 10.7 sequences of 2 GiB


def test_warning_names_what_fits_and_how_to_fix(llama2_7b):
    r = check_fit(llama2_7b, dtype="float16", max_model_len=4096, max_num_seqs=16, gpu_type="a100-40gb")
    assert r.level == "warning"
    assert r.details["kv_pool_bytes"] == POOL == 23_030_390_784
    assert r.details["kv_needed_bytes"] == 32 * GIB
    assert r.details["max_seqs_at_max_model_len"] == 10
    # 43,920 tokens (whole 16-token blocks) shared by 16 sequences: 2,745 each, 2,736 in whole blocks.
    assert r.details["longest_sequence_tokens"] == 43_920
    assert r.details["max_model_len_for_max_num_seqs"] == 2736
    assert "only 10 sequences fit" in r.message and "lower maxNumSeqs to 10" in r.message
    assert "maxModelLen to 2736" in r.message and "32.00 GiB" in r.message


def test_fits_with_fewer_sequences_or_more_gpus(llama2_7b):
    r = check_fit(llama2_7b, dtype="float16", max_num_seqs=8, gpu_type="a100-40gb")
    assert r.level == "ok" and r.message.startswith("fits:") and r.details["max_model_len"] == 4096
    two = check_fit(llama2_7b, dtype="float16", max_num_seqs=16, gpus=2, gpu_type="a100-40gb")
    assert two.level == "ok" and two.details["kv_pool_bytes"] == int(80 * GIB * 0.9) - WEIGHTS - 4 * GIB
    explicit = check_fit(llama2_7b, dtype="float16", max_num_seqs=8, gpu_type="a100-40gb", overhead_bytes=GIB)
    assert explicit.details["kv_pool_bytes"] == BUDGET - WEIGHTS - GIB


def test_refuses_when_one_sequence_cannot_fit(llama2_7b):
    r = check_fit(llama2_7b, max_model_len=32768, gpu_type="a10-24gb")
    assert r.level == "refuse"
    assert "not even one sequence at maxModelLen 32768" in r.message
    # 24 GiB x 0.9 - 13.48 GB of bf16 weights - 1.2 GiB (5%) = 8.43 GB: 1,004 blocks of 16 tokens x 512 KiB.
    assert r.details["longest_sequence_tokens"] == 16_064 and "lower maxModelLen to 16064" in r.message


def test_refuses_when_the_weights_alone_do_not_fit(llama2_7b):
    r = check_fit(llama2_7b, dtype="float32", gpu_type="l4")
    assert r.level == "refuse" and "float32 weights (25.10 GiB) leave no room" in r.message
    awq = check_fit(llama2_7b, dtype="float32", gpu_type="l4", quantization="awq")
    # AWQ's int4 weights and group scales (3.50 GB) leave 17.14 GiB: four float32 sequences of 4 GiB at 4096 tokens.
    assert awq.level == "warning" and awq.details["max_seqs_at_max_model_len"] == 4
    int4 = check_fit(llama2_7b, dtype="float32", gpu_type="l4", quantization="int4")
    # Our int4 keeps a float32 scale and offset per 32 weights (5.05 GB), leaving 15.69 GiB: three sequences.
    assert int4.level == "warning" and int4.details["max_seqs_at_max_model_len"] == 3


def test_max_model_len_beyond_the_model_warns(llama2_7b):
    r = check_fit(llama2_7b, max_model_len=8192, max_num_seqs=1, gpu_type="h100-80gb")
    assert r.level == "warning" and "exceeds the model's 4096 positions" in r.message


def test_gpu_product_label_and_memory_override(llama2_7b):
    label = check_fit(llama2_7b, max_num_seqs=8, gpu_type="NVIDIA-A100-SXM4-40GB", dtype="float16")
    assert label.level == "ok" and label.details["gpu"] == "a100-40gb"
    custom = check_fit(llama2_7b, max_num_seqs=4, gpu_type="rtx-9090", gpu_memory="48Gi")
    assert custom.level == "ok" and custom.details["budget_bytes"] == int(48 * GIB * 0.9)


@pytest.mark.parametrize("kwargs,reason", [
    (dict(gpus=0), "no GPU requested"),
    (dict(), "no GPU type or GPU memory given"),
])
def test_not_checked_is_ok(llama2_7b, kwargs, reason):
    r = check_fit(llama2_7b, **kwargs)
    assert (r.level, r.details) == ("ok", {"checked": False}) and reason in r.message


def test_model_not_available_locally_is_not_refused(hf_cache):
    r = check_fit("Qwen/Qwen2.5-7B-Instruct", gpu_type="h100-80gb")
    assert r.level == "ok" and r.message.startswith("fit not checked") and not r.details["checked"]


def test_unknown_gpu_type_warns_unchecked(llama2_7b):
    r = check_fit(llama2_7b, gpu_type="rtx-9090")
    assert r.level == "warning" and "unknown GPU type 'rtx-9090'" in r.message


@pytest.mark.parametrize("kwargs,message", [
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization must be in \\(0, 1\\]"),
    (dict(max_num_seqs=0), "max_num_seqs must be a positive integer"),
    (dict(gpus=-1), "gpus must be a positive integer"),
    (dict(dtype="float64"), "unknown dtype 'float64'"),
    (dict(quantization="int3"), "unknown quantization 'int3'"),
    (dict(gpu_memory="lots"), "GPU memory: cannot read 'lots'"),
])
def test_bad_settings_refuse_with_the_reason(llama2_7b, kwargs, message):
    r = check_fit(llama2_7b, **{"gpu_type": "a100-40gb", **kwargs})
    assert r.level == "refuse"
    assert re.search(message, r.message), r.message


def test_builtin_model_fits_anywhere():
    r = check_fit("floodway/tiny-llama", gpu_type="l4")
    assert r.level == "ok" and r.details["params"] == 4_999_424
