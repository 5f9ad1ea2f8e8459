"""Hugging Face quantized formats, one linear at a time: our decoders against each format's reference
(GPTQModel's own dequantization of checkpoints it made, tests/data/quant-reference; compressed-tensors' own
compress/decompress; torch's FP8 cast), the test packers (tests/quant_checkpoints.py) against GPTQModel's bytes,
the CPU kernels on what the decoders give (act-order permutation, coarse groups repeated; FP8 refused), the errors
a loader could make caught, and config.json's variants we do not serve refused naming the format and the
alternative."""

import pathlib

import pytest
import torch
from floodway.engine.quant import formats, hf_decode, linear, weights
from safetensors.torch import load_file

from tests import quant_checkpoints as packers

REFERENCE = pathlib.Path(__file__).parents[2] / "data" / "quant-reference" / "reference.safetensors"
CPU = torch.device("cpu")
ROWS, COLUMNS = 64, 256  # the reference linear: the first 64 rows of layer 0's q_proj


def _reference(variant: str) -> tuple[weights.QuantWeight, dict]:
    t = {k.split(".", 1)[1]: v for k, v in load_file(str(REFERENCE)).items() if k.startswith(f"{variant}.")}
    if variant == "awq":
        return hf_decode.awq("q_proj", t, ROWS, COLUMNS, 128, "AWQ int4"), t
    return hf_decode.gptq("q_proj", t, ROWS, COLUMNS, 4, 128, 1, "GPTQ int4"), t


@pytest.mark.parametrize("variant", ["gptq_actorder", "gptq_sym", "awq"])
def test_decoders_equal_gptqmodels_dequantization(variant):
    """GPTQModel multiplies in the scales' dtype; our float32 values round to exactly its numbers."""
    qw, t = _reference(variant)
    ref = t["reference"]
    assert torch.equal(qw.dequantize().to(ref.dtype), ref)
    assert (qw.perm is not None) == (variant == "gptq_actorder")  # a real act-order g_idx permutes the input


@pytest.mark.parametrize("variant", ["gptq_actorder", "gptq_sym", "awq"])
def test_test_packers_write_gptqmodels_bytes(variant):
    """The packers that make the tests' checkpoints give GPTQModel's words for the same codes, zeros and scales."""
    qw, t = _reference(variant)
    order = torch.argsort(qw.perm) if qw.perm is not None else torch.arange(COLUMNS)
    codes, scale = qw.codes[:, order], qw.scales.half() if variant != "awq" else qw.scales.bfloat16()
    zero = torch.round(-qw.mins / qw.scales).to(torch.uint8)
    if variant == "awq":
        got = packers.awq_tensors(codes, zero, scale)
    else:
        got = packers.gptq_tensors(codes, zero, scale, 4, t["g_idx"], v1=True)
    for name, want in got.items():
        assert torch.equal(want, t[name]), name


def _broken(qw: weights.QuantWeight, how: str) -> weights.QuantWeight:
    if how == "group":  # groups of 128 read as 64: every scale and min spread over half its columns
        return weights.QuantWeight(qw.codes, torch.cat([qw.scales] * 2, 1), torch.cat([qw.mins] * 2, 1), 4, 64,
                                   qw.name, qw.perm)
    if how == "swapped scales":
        return weights.QuantWeight(qw.codes, qw.scales[:, [1, 0]], qw.mins[:, [1, 0]], 4, 128, qw.name, qw.perm)
    if how == "no act-order":
        return weights.QuantWeight(qw.codes, qw.scales, qw.mins, 4, 128, qw.name)
    return weights.QuantWeight(qw.codes, qw.scales, qw.mins - qw.scales, 4, 128, qw.name, qw.perm)  # zero + 1


@pytest.mark.parametrize("how", ["group", "swapped scales", "no act-order", "zero point"])
def test_injected_errors_fail_the_reference_comparison(how):
    qw, t = _reference("gptq_actorder")
    got = _broken(qw, how).dequantize()
    assert (got - t["reference"].float()).abs().max().item() > 0.5 * qw.scales.min().item()


def test_v1_zero_points_are_decoded_word_wise():
    """GPTQ v1 stores each zero-point word minus 0x11111111: a zero point of 0 borrows from its neighbour, and
    decoding adds the word back rather than 1 per nibble."""
    zero = torch.tensor([[0, 3, 15, 0, 7, 8, 1, 2]], dtype=torch.uint8).T  # [out 8, groups 1]
    scale = torch.ones(8, 1, dtype=torch.float16)
    codes = torch.zeros(8, 32, dtype=torch.uint8)
    t = packers.gptq_tensors(codes, zero, scale, 4, torch.zeros(32, dtype=torch.int32), v1=True)
    nibble_wise = (hf_decode.unpack(t["qzeros"], 4)[0].long() + 1) & 15
    assert nibble_wise.tolist() != zero[:, 0].tolist()  # the borrow after each zero point of 0 shows
    qw = hf_decode.gptq("p", t, 8, 32, 4, None, 1, "GPTQ int4")
    assert torch.equal(-qw.mins[:, 0], zero[:, 0].float())


def _compressed(preset: str, **weight_args):
    """A random linear compressed and decompressed by compressed-tensors itself."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams

    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.weights = scheme.weights.model_copy(update=weight_args)
    args = scheme.weights
    w = torch.randn(96, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    view = packers.by_scale(w, args)
    scale, zero = calculate_qparams(view.amin(-1), view.amax(-1), args)
    shape = {"group": (96, -1), "channel": (96, 1), "tensor": (1,)}[args.strategy]  # as the module holds them
    state = {"weight": w, "weight_scale": scale.reshape(shape), "weight_zero_point": zero.reshape(shape)}
    compressor = BaseCompressor.load_from_registry("float-quantized" if args.type == "float" else "pack-quantized")
    stored = compressor.compress(state, scheme)
    return stored, compressor.decompress(stored, scheme)["weight"], args


@pytest.mark.parametrize("preset,weight_args", [
    ("W4A16", {}), ("W4A16_ASYM", {}), ("W8A16", {}), ("W8A16", {"strategy": "channel", "group_size": None}),
    ("W4A16_ASYM", {"strategy": "channel", "group_size": None}), ("FP8_DYNAMIC", {}), ("FP8", {})])
def test_compressed_tensors_decode_as_the_library_decompresses(preset, weight_args):
    stored, ref, args = _compressed(preset, **weight_args)
    group = args.group_size if args.strategy == "group" else None
    if args.type == "float":
        qw = hf_decode.e4m3("p", stored, 96, 256, "compressed-tensors FP8")
    else:
        qw = hf_decode.packed("p", stored, 96, 256, args.num_bits, group, f"compressed-tensors W{args.num_bits}A16")
    assert torch.equal(qw.dequantize().to(ref.dtype), ref)  # the library computes in the scales' bf16
    assert ("weight_zero_point" in stored) == (not args.symmetric and args.strategy != "tensor")


def test_compressed_tensors_g_idx_permutes_the_input():
    """weight_g_idx (the removed "group" actorder; older checkpoints carry it) means what GPTQ's g_idx does."""
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(4))
    g_idx = torch.randperm(256, generator=torch.Generator().manual_seed(5)) // 128
    codes, zero, scale = packers.group_quantize(w, 4, 128, True, g_idx)
    t = {"weight_packed": packers.pack(codes, 4), "weight_scale": scale, "weight_g_idx": g_idx.to(torch.int32)}
    qw = hf_decode.packed("p", t, 32, 256, 4, 128, "compressed-tensors W4A16")
    want = (codes.float() - zero.float()[:, g_idx]) * scale.float()[:, g_idx]
    assert qw.perm is not None and torch.equal(qw.dequantize(), want)


def test_fp8_decodes_as_torchs_cast():
    w = torch.randn(40, 64) * 3
    w[0, :4] = torch.tensor([0.0, 1e-3, -448.0, 2e-4])  # zero, subnormal and extreme codes
    for scale in (torch.tensor(0.02), torch.rand(40) / 50 + 1e-3):
        q = (w / scale.reshape(-1, 1)).to(torch.float8_e4m3fn)
        qw = hf_decode.e4m3("p", {"weight": q, "weight_scale": scale}, 40, 64, "FP8 E4M3")
        assert torch.equal(qw.dequantize(), q.float() * scale.reshape(-1, 1))


def _kernel_error(qw: weights.QuantWeight, rows=6) -> tuple[float, torch.nn.Module]:
    x = torch.randn(rows, qw.shape[1], generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    lin = linear.make(qw, None, CPU, torch.bfloat16)
    want = x.float() @ qw.dequantize().T
    return (lin(x).float() - want).abs().max().item() / want.abs().max().item(), lin


@pytest.mark.parametrize("variant", ["gptq_actorder", "awq"])
def test_cpu_kernel_serves_the_decoded_weight(variant):
    rel, lin = _kernel_error(_reference(variant)[0])
    assert rel < 1e-2, rel  # bf16 activations and scales
    assert "group 128" in lin.kernel


def test_fp8_is_refused_on_cpu_naming_int8_and_a_gpu():
    with pytest.raises(linear.Unsupported, match="fp8 weights have no CPU kernel.*GPU.*--quantization int8"):
        linear.make(weights.fp8(torch.randn(48, 96)), None, CPU, torch.bfloat16)


def test_per_channel_int8_is_served_in_repeated_groups():
    """One scale per row over 576 columns (SmolLM2's width, not a multiple of 128) is served as groups of 64."""
    w = torch.randn(32, 576, generator=torch.Generator().manual_seed(7))
    codes, zero, scale = packers.group_quantize(w, 8, 576, True)
    qw = weights.QuantWeight(codes, scale.float(), -zero.float() * scale.float(), 8, 576, "GPTQ int8")
    assert torch.equal(weights.regroup(qw, 64).dequantize(), qw.dequantize())
    rel, lin = _kernel_error(qw)
    assert rel < 1e-2 and "group 64" in lin.kernel


def test_merging_needs_one_act_order():
    qw = _reference("gptq_actorder")[0]
    assert torch.equal(weights.merge([qw, qw]).perm, qw.perm)
    other = weights.QuantWeight(qw.codes, qw.scales, qw.mins, 4, 128, qw.name, torch.flip(qw.perm, [0]))
    with pytest.raises(ValueError, match="act-order"):
        weights.merge([qw, other])


def test_bad_tensors_are_named():
    _, t = _reference("gptq_sym")
    with pytest.raises(ValueError, match=r"q_proj.qzeros has shape \[2, 8\], expected \[4, 8\].*group_size"):
        hf_decode.gptq("q_proj", t, ROWS, COLUMNS, 4, 64, 1, "GPTQ int4")
    with pytest.raises(ValueError, match="q_proj.g_idx does not give each group 128 input columns"):
        hf_decode.gptq("q_proj", {**t, "g_idx": torch.zeros(256, dtype=torch.int32)}, ROWS, COLUMNS, 4, 128, 1, "x")
    with pytest.raises(ValueError, match="q_proj.qweight is float32, expected int32"):
        hf_decode.gptq("q_proj", {**t, "qweight": t["qweight"].float()}, ROWS, COLUMNS, 4, 128, 1, "x")
    with pytest.raises(ValueError, match="256 input columns are not whole groups of 96"):
        hf_decode.awq("q_proj", t, ROWS, COLUMNS, 96, "AWQ int4")


@pytest.mark.parametrize("config,match", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, "AWQ gemv.*AWQ GEMM is.*vLLM"),
    ({"quant_method": "awq", "w_bit": 8, "q_group_size": 128}, "AWQ with 8-bit codes.*4-bit AWQ GEMM.*vLLM"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "GPTQ with 3-bit codes has no kernel.*vLLM"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"}, "GPTQ .*marlin"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": {"-:.*": {}}}, "per-module overrides"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "GPTQ group_size 0"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "block-wise FP8.*per-tensor and per-channel.*vLLM"),
    ({"quant_method": "bitsandbytes"}, "is a bitsandbytes checkpoint.*we load awq, gptq, compressed-tensors, fp8"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"g": {"weights": {
        "type": "int", "num_bits": 8, "strategy": "channel"}}}}, "int-quantized with 8-bit int weights.*W4A16"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"weights": {
        "type": "float", "num_bits": 8, "strategy": "block"}}}}, "FP8 with strategy block.*channel or tensor"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "sparsity_config": {"format": "2:4"},
      "config_groups": {}}, "sparsity_config"),
])
def test_unserved_variants_are_refused_naming_the_alternative(config, match):
    with pytest.raises(formats.Unsupported, match=match):
        formats.scheme({"quantization_config": config}, "ckpt")


@pytest.mark.parametrize("config,want", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "GEMM"},
     formats.Scheme("awq", "awq", 4, 128, 0, "AWQ int4")),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1, "checkpoint_format": "gptq_v2"},
     formats.Scheme("gptq", "gptq", 8, None, 0, "GPTQ int8")),
    ({"quant_method": "fp8", "activation_scheme": "static"}, formats.Scheme("fp8", "e4m3", 8, None, 0, "FP8 E4M3")),
])
def test_schemes_read_from_config(config, want):
    assert formats.scheme({"quantization_config": config}, "ckpt") == want


def test_kernels_refuse_groups_they_cannot_serve():
    with pytest.raises(linear.Unsupported, match="GPTQ int4 has groups of 48 columns.*vLLM"):
        linear.check("GPTQ int4", 4, 48, CPU, torch.bfloat16, alternative=formats.ELSEWHERE)
    linear.check("GPTQ int4", 4, 1024, CPU, torch.bfloat16)  # served as groups of 256
