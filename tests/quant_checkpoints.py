"""Quantized Hugging Face checkpoints made from a seeded float model for the tests, each with the weights its
format means (the oracle the engine's logits are compared with).

compressed-tensors: made by the compressed-tensors library itself (its schemes, its scale rule `calculate_qparams`
and its ModelCompressor), dequantized by transformers' own compressed-tensors loader (`dequantize=True`).
AWQ and GPTQ: their reference library (GPTQModel) takes minutes per model on two cores and a heavy install, so the
packers here write the layouts as vLLM's loaders and GPTQModel/AutoAWQ document them (facts only, restated in
engine/quant/hf_decode.py), and test_quant_hf_formats.py pins them to GPTQModel's own output
(tests/data/quant-reference). FP8: torch's float8_e4m3fn cast, the scales as vLLM's fp8 checkpoints hold them.
"""

import json
import pathlib
import shutil

import torch

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Projections reading one input share one act-order permutation (GPTQ orders by that input's statistics).
SHARED_INPUT = {"q_proj": "attn", "k_proj": "attn", "v_proj": "attn", "o_proj": "o", "gate_proj": "mlp",
                "up_proj": "mlp", "down_proj": "down"}
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ GEMM: word nibble i holds output column 8j + AWQ_ORDER[i]


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes [..., n] -> int32 words [..., n * bits / 32], the first code in the lowest bits."""
    per = 32 // bits
    c = codes.to(torch.int64).reshape(*codes.shape[:-1], -1, per)
    words = (c << (torch.arange(per) * bits)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def group_quantize(w: torch.Tensor, bits: int, group: int, sym: bool, g_idx: torch.Tensor | None = None):
    """Min-max round-to-nearest per (row, group): codes [out, in], zeros and fp16 scales [out, groups]; g_idx
    assigns each input column its group (default: runs of `group`)."""
    out_f, in_f = w.shape
    g_idx = torch.arange(in_f) // group if g_idx is None else g_idx
    maxq = 2**bits - 1
    groups = int(g_idx.max()) + 1
    lo = torch.stack([w[:, g_idx == g].amin(1) for g in range(groups)], 1).clamp(max=0)
    hi = torch.stack([w[:, g_idx == g].amax(1) for g in range(groups)], 1).clamp(min=0)
    if sym:
        scale = (torch.maximum(-lo, hi) / (maxq / 2)).half()
        zero = torch.full_like(lo, (maxq + 1) // 2)
    else:
        scale = ((hi - lo) / maxq).half()
        zero = torch.round(-lo / scale.float()).clamp(0, maxq)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(w / scale.float()[:, g_idx] + zero[:, g_idx]).clamp(0, maxq)
    return codes.to(torch.uint8), zero.to(torch.uint8), scale


def awq_tensors(codes, zero, scale) -> dict:
    def words(c):  # [rows, out] -> [rows, out / 8] in AWQ's interleaved order
        return pack(c.reshape(c.shape[0], -1, 8)[..., list(AWQ_ORDER)].reshape(c.shape[0], -1), 4)
    return {"qweight": words(codes.T), "qzeros": words(zero.T), "scales": scale.T.contiguous()}


def gptq_tensors(codes, zero, scale, bits: int, g_idx: torch.Tensor, v1: bool) -> dict:
    qzeros = pack(zero.T, bits)
    if v1:  # every zero-point word stored as the v2 word minus 0x11111111 (4-bit) / 0x01010101 (8-bit)
        ones = sum(1 << (bits * i) for i in range(32 // bits))
        q = (qzeros.to(torch.int64) - ones) & 0xFFFFFFFF
        qzeros = torch.where(q >= 2**31, q - 2**32, q).to(torch.int32)
    return {"qweight": pack(codes, bits).T.contiguous(), "qzeros": qzeros, "scales": scale.T.contiguous(),
            "g_idx": g_idx.to(torch.int32)}


def _linears(state: dict, head: bool = False) -> list[str]:
    return [name.removesuffix(".weight") for name in state if name.endswith(".weight") and (
        name.startswith("model.layers.") and name.split(".")[-2] in LINEARS or head and name == "lm_head.weight")]


def _save(src: str, out: pathlib.Path, tensors: dict, quantization_config: dict) -> str:
    from safetensors.torch import save_file

    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors"))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": quantization_config}))
    return str(out)


def write_gptq_or_awq(src: str, out: pathlib.Path, fmt: str, bits: int = 4, group: int = 128, sym: bool = False,
                      act_order: bool = False, v1: bool = True, head: bool = False, seed: int = 0) -> tuple[str, dict]:
    """The float checkpoint at `src` with its layers' linears (and with `head` its lm_head, GPTQ's lm_head option)
    as `fmt` (awq or gptq) -> (folder, {linear weight: the float weight it means})."""
    from safetensors.torch import load_file

    state = load_file(str(pathlib.Path(src) / "model.safetensors"))
    meant, gen = {}, torch.Generator().manual_seed(seed)
    perms = {}
    for prefix in _linears(state, head):
        w = state.pop(f"{prefix}.weight").float()
        in_f = w.shape[1]
        g = in_f if group == -1 else group
        g_idx = torch.arange(in_f) // g
        if act_order:  # a random act-order: g_idx[perm[i]] = i // group, as GPTQ assigns it
            key = (prefix.rsplit(".", 2)[0], SHARED_INPUT.get(prefix.rsplit(".", 1)[-1], prefix))
            perm = perms.setdefault(key, torch.randperm(in_f, generator=gen))
            g_idx = torch.empty_like(g_idx).scatter_(0, perm, torch.arange(in_f) // g)
        codes, zero, scale = group_quantize(w, bits, g, sym, g_idx)
        meant[f"{prefix}.weight"] = (codes.float() - zero.float()[:, g_idx]) * scale.float()[:, g_idx]
        tensors = awq_tensors(codes, zero, scale) if fmt == "awq" else gptq_tensors(codes, zero, scale, bits, g_idx,
                                                                                     v1)
        state.update({f"{prefix}.{k}": v for k, v in tensors.items()})
    config = ({"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": not sym, "version": "gemm"}
              if fmt == "awq" else
              {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": sym,
               "checkpoint_format": "gptq" if v1 else "gptq_v2", "lm_head": head})
    return _save(src, out, state, config), meant


def write_fp8(src: str, out: pathlib.Path, per_channel: bool) -> tuple[str, dict]:
    """vLLM's fp8 checkpoint layout: E4M3 weights, a float32 weight_scale per tensor (or per output row)."""
    from safetensors.torch import load_file

    state = load_file(str(pathlib.Path(src) / "model.safetensors"))
    meant = {}
    for prefix in _linears(state):
        w = state.pop(f"{prefix}.weight").float()
        scale = (w.abs().amax(1, keepdim=True) if per_channel else w.abs().amax()) / 448.0
        q = (w / scale).to(torch.float8_e4m3fn)
        meant[f"{prefix}.weight"] = q.float() * scale
        state[f"{prefix}.weight"], state[f"{prefix}.weight_scale"] = q, scale.float().reshape(-1)
    return _save(src, out, state, {"quant_method": "fp8", "activation_scheme": "dynamic"}), meant


def write_compressed(src: str, out: pathlib.Path, preset: str, **weight_args) -> str:
    """The float checkpoint quantized by compressed-tensors: `preset` (W4A16, W4A16_ASYM, W8A16, FP8,
    FP8_DYNAMIC) with its weight arguments overridden by `weight_args`, min-max scales, saved compressed."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.weights = scheme.weights.model_copy(update=weight_args)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"]))
    for module in model.modules():
        args = getattr(getattr(module, "quantization_scheme", None), "weights", None)
        if args is None:
            continue
        view = by_scale(module.weight.detach(), args)
        scale, zero = calculate_qparams(view.amin(-1), view.amax(-1), args)
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape))
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(str(out))
    compressor.update_config(str(out))
    for f in pathlib.Path(src).iterdir():  # the tokenizer's files
        if not (out / f.name).exists():
            shutil.copy(f, out)
    return str(out)


def by_scale(w: torch.Tensor, args) -> torch.Tensor:
    """w [out, in] viewed [rows, scales, columns each scale covers] for a compressed-tensors strategy."""
    if args.strategy == "group":
        return w.unflatten(-1, (-1, args.group_size))
    return w[:, None, :] if args.strategy == "channel" else w.reshape(1, 1, -1)


def compressed_meant(folder: str) -> dict:
    """The checkpoint's linears as transformers' own compressed-tensors loader decompresses them."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 quantization_config=CompressedTensorsConfig(dequantize=True))
    return {n: p.detach().float() for n, p in model.named_parameters() if n.split(".")[-2] in LINEARS}
