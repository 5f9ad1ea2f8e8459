"""The GPU table and byte sizes."""

import pytest
from floodway.operator.planner.gpus import find_gpu, gpu_table, known_gpus, resolve_gpu
from floodway.operator.planner.units import PlanError, fmt_bytes, parse_bytes


def test_table_rows_are_complete_and_sane():
    names = known_gpus()
    assert {"h100-80gb", "a100-40gb", "a100-80gb", "a10-24gb", "l4", "l40s", "h200"} <= set(names)
    for spec in gpu_table().values():
        assert 16 * 2**30 <= spec.memory_bytes <= 256 * 2**30
        assert 1e11 < spec.bandwidth_bytes_per_s < 1e13 and 5e13 < spec.bf16_flops < 5e15


@pytest.mark.parametrize("name,row", [("H100", "h100-80gb"), ("NVIDIA-A100-SXM4-40GB", "a100-40gb"),
                                      ("nvidia_l4", "l4"), (" A10 ", "a10-24gb")])
def test_aliases_and_spelling(name, row):
    assert find_gpu(name).name == row


def test_resolve_overrides_and_custom():
    a10 = resolve_gpu("a10-24gb")
    assert (a10.memory_bytes, a10.bandwidth_bytes_per_s, a10.bf16_flops) == (24 * 2**30, 600e9, 125e12)
    tweaked = resolve_gpu("a10-24gb", gpu_memory="22Gi", bandwidth_gbs=500)
    assert (tweaked.name, tweaked.memory_bytes, tweaked.bandwidth_bytes_per_s) == ("a10-24gb", 22 * 2**30, 500e9)
    custom = resolve_gpu(gpu_memory="48GB")
    assert (custom.name, custom.memory_bytes, custom.bandwidth_bytes_per_s) == ("custom", 48 * 10**9, None)
    assert resolve_gpu() is None


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(PlanError, match="unknown GPU 'tpu-v5'; known: .*h100-80gb.*--gpu-memory"):
        resolve_gpu("tpu-v5")
    with pytest.raises(PlanError, match="GPU bandwidth must be positive"):
        resolve_gpu("l4", bandwidth_gbs=-1)


@pytest.mark.parametrize("text,value", [("80Gi", 80 * 2**30), ("80GiB", 80 * 2**30), ("40GB", 40 * 10**9),
                                        ("24g", 24 * 10**9), ("512Mi", 2**29), ("1.5e9", 1_500_000_000),
                                        (2**30, 2**30), ("1Ti", 2**40)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "lots", "80 GiB of HBM", "-3Gi", "0"])
def test_parse_bytes_rejects(text):
    with pytest.raises(PlanError, match="size"):
        parse_bytes(text)


def test_fmt_bytes():
    assert fmt_bytes(2**31) == "2.00 GiB (2.15 GB)"
    assert fmt_bytes(2**20) == "1.00 MiB (1.05 MB)"
