"""Quantized weights and their CPU kernels against float references: GGUF blocks (its own quantizer's, and random
blocks of every type we load, K-quants included) decoded against the `gguf` package's own dequantizer,
round-to-nearest within half a step of the float weight, each kernel against x @ w.T of the dequantized weight, and
the errors a loader could make (wrong group size, swapped scales, wrong zero point) caught by the same comparisons."""

import numpy as np
import pytest
import torch
from floodway.engine.kernels import cpu, cpu_quant_matmul
from floodway.engine.quant import linear, weights
from floodway.engine.quant.gguf_weights import BLOCKS, decode

from tests.gguf_blocks import random_blocks

gguf = pytest.importorskip("gguf")
CPU = torch.device("cpu")
# Every kernel test runs on both CPU kernels: ours where this machine runs it, and torch's packed one.
KERNELS = ["ours", "torch"] if cpu.available() else ["torch"]
NAMES = {"ours": cpu_quant_matmul.name, "torch": lambda bits: "aten._weight_int4pack_mm_for_cpu"}


@pytest.fixture(params=KERNELS)
def kernel(request, monkeypatch):
    monkeypatch.setattr(linear, "CPU_INT4", request.param)
    return request.param


def _gguf_quantized(kind: str, out_f=96, in_f=192, seed=0) -> tuple[weights.QuantWeight, np.ndarray]:
    w = np.random.default_rng(seed).standard_normal((out_f, in_f)).astype(np.float32)
    qtype = gguf.GGMLQuantizationType[kind]
    raw = gguf.quants.quantize(w, qtype)
    return decode(raw.reshape(out_f, in_f // 32, BLOCKS[kind][1]), kind), gguf.quants.dequantize(raw, qtype)


def _random_blocks(kind: str, out_f=96, in_f=512, seed=0) -> tuple[weights.QuantWeight, np.ndarray]:
    blocks, reference = random_blocks(kind, out_f, in_f, seed)
    return decode(blocks, kind), reference


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_every_block_pattern_decodes_to_the_reference_values(kind):
    qw, reference = _random_blocks(kind)
    bits = {"Q2_K": 2, "Q3_K": 3, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6}.get(kind, qw.bits)
    assert int(qw.codes.max()) < 2 ** bits
    np.testing.assert_array_equal(qw.dequantize().numpy(), reference)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
def test_gguf_blocks_decode_to_the_reference_values(kind):
    qw, reference = _gguf_quantized(kind)
    assert qw.bits == (8 if kind == "Q8_0" else 4) and qw.codes.dtype == torch.uint8
    assert int(qw.codes.max()) < 2 ** qw.bits
    np.testing.assert_array_equal(qw.dequantize().numpy(), reference)


@pytest.mark.parametrize("bits", [8, 4])
def test_rtn_is_within_half_a_step(bits):
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    w[3, :32] = 0.5  # a constant group
    qw = weights.rtn(w, bits)
    step = qw.scales.repeat_interleave(qw.group, 1)
    err = (qw.dequantize() - w).abs()
    assert (err <= step / 2 + 1e-6).all()
    assert torch.equal(qw.dequantize()[3, :32], w[3, :32])
    # int8's step is absmax/127 of a group, int4's range/15: the mean error relative to the weights says so
    rel = (err.mean() / w.abs().mean()).item()
    assert rel < (0.01 if bits == 8 else 0.1), rel


def test_rtn_refuses_columns_not_in_whole_groups():
    with pytest.raises(ValueError, match="divisible by 32"):
        weights.rtn(torch.randn(8, 48), 4)


def _kernel_vs_reference(qw, bias=None, rows=5):
    x = torch.randn(rows, qw.shape[1], generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    lin = linear.make(qw, bias, CPU, torch.bfloat16)
    got = lin(x).float()
    want = x.float() @ qw.dequantize().T + (0 if bias is None else bias)
    return (got - want).abs().max().item() / want.abs().max().item(), lin


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "int8", "int4"])
@pytest.mark.parametrize("rows", [1, 7, 40])
def test_cpu_kernel_matches_the_dequantized_weight(kind, rows, kernel):
    if kind.startswith("Q"):
        qw = _gguf_quantized(kind, out_f=160, in_f=224)[0]
    else:
        qw = weights.rtn(torch.randn(160, 224, generator=torch.Generator().manual_seed(3)), int(kind[3:]))
    bias = torch.randn(160)
    rel, lin = _kernel_vs_reference(qw, bias, rows)
    assert rel < 1e-2, rel  # bf16 activations and scales: a few ulp of bf16 (2^-8) over the sum
    assert lin.kernel.startswith(NAMES[kernel](qw.bits)) and kind in lin.kernel
    assert lin.in_features == 224 and lin.out_features == 160


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_packing_in_row_chunks_serves_the_same_weight(kind, monkeypatch):
    """Torch's packer runs a chunk of rows at a time (its int32 copy is 4 bytes a weight): chunks of 64 rows and a
    last short one give the weight packed whole."""
    monkeypatch.setattr(linear, "CPU_INT4", "torch")
    qw = _gguf_quantized(kind, out_f=176, in_f=192)[0]
    x = torch.randn(3, 192).to(torch.bfloat16)
    whole = linear.make(qw, None, CPU, torch.bfloat16)(x)
    monkeypatch.setattr(linear, "PACK_ROWS", 64)  # 64 + 64 + 48 rows
    assert torch.equal(linear.make(qw, None, CPU, torch.bfloat16)(x), whole)


@pytest.mark.parametrize("kind", ["Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_cpu_kernel_serves_five_six_bit_and_k_quant_blocks(kind, kernel):
    """Groups of 16 (Q2_K, Q3_K, Q6_K) spread over 32 columns; 2- and 3-bit codes on the int4 path and 5- and 6-bit
    ones on the int8 path, centred so that their bf16 scales and zeros do not cancel (uncentred, Q5_0 measured 0.03
    here, 10x the bound)."""
    qw = _random_blocks(kind, out_f=96, in_f=512, seed=4)[0]
    rel, lin = _kernel_vs_reference(qw, torch.randn(96), rows=7)
    assert rel < 1e-2, rel
    assert lin.in_features == 512 and ("spread" in lin.kernel) == (kind in ("Q2_K", "Q3_K", "Q6_K"))


def _broken(qw: weights.QuantWeight, how: str) -> weights.QuantWeight:
    s, m, group = qw.scales.clone(), qw.mins.clone(), qw.group
    if how == "group":  # blocks of 32 read as groups of 64: every other block's scale and min
        s, m, group = s[:, ::2], m[:, ::2], group * 2
    elif how == "swapped scales":
        s[:, [0, 1]] = s[:, [1, 0]]
    else:  # a Q4_0 read as if its zero point were 0 (no -8 offset)
        m = torch.zeros_like(m)
    return weights.QuantWeight(qw.codes, s, m, qw.bits, group, qw.name)


@pytest.mark.parametrize("how", ["group", "swapped scales", "zero point"])
def test_injected_errors_fail_the_kernel_comparison(how, kernel):
    qw, reference = _gguf_quantized("Q4_0", out_f=64, in_f=256)
    broken = _broken(qw, how)
    assert not np.allclose(broken.dequantize().numpy(), reference, atol=1e-3)
    x = torch.randn(3, 256).to(torch.bfloat16)
    got = linear.make(broken, None, CPU, torch.bfloat16)(x).float()
    want = x.float() @ torch.from_numpy(reference).T
    assert (got - want).abs().max().item() / want.abs().max().item() > 0.05


def test_merged_projections_stack_rows():
    a, b = (_gguf_quantized("Q4_1", out_f=n, seed=n)[0] for n in (32, 64))
    merged = weights.merge([a, b])
    assert torch.equal(merged.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))
    with pytest.raises(ValueError, match="quantized differently"):
        weights.merge([a, _gguf_quantized("Q8_0", out_f=32)[0]])


def test_quant_embedding_rows_equal_the_dequantized_table():
    qw = _gguf_quantized("Q8_0", out_f=50, in_f=64)[0]
    emb = linear.QuantEmbedding(qw, CPU, torch.float32)
    ids = torch.tensor([0, 7, 49, 7])
    assert torch.equal(emb(ids), qw.dequantize()[ids])


@pytest.mark.parametrize("device,dtype,group,match", [
    ("cpu", torch.float32, 32, "compute in bfloat16.*--dtype bfloat16.*--quantization none"),
    ("cpu", torch.float16, 32, "compute in bfloat16"),
    ("cpu", torch.bfloat16, 48, "groups of 48 columns.*--quantization none"),
    ("mps", torch.bfloat16, 32, "no int4 kernel on mps: use --quantization none")])
def test_refused_where_no_kernel_serves_it(device, dtype, group, match):
    with pytest.raises(linear.Unsupported, match=match):
        linear.check("int4", 4, group, torch.device(device), dtype)
