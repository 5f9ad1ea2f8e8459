"""One linear's tensors in a Hugging Face quantized checkpoint -> `weights.QuantWeight` (pure functions).

The layouts, as vLLM's loaders and the formats' own packers (GPTQModel, AutoAWQ, compressed-tensors) define them;
w is [out, in] as torch.nn.Linear holds it, integer codes are unsigned and packed little end first into int32 words:
- AWQ GEMM: qweight [in, out / 8] packed along the output, word nibble i holding output column 8j + AWQ_ORDER[i];
  qzeros [in / group, out / 8] likewise; scales [in / group, out]; w = (q - z) * s.
- GPTQ: qweight [in * bits / 32, out] packed along the input (word r holds input rows r * 32 / bits ...);
  qzeros [groups, out * bits / 32] packed along the output; scales [groups, out]; g_idx [in], each input row's
  group (act-order, desc_act, permutes them); w = (q - z) * s. v1 ("gptq") stores every zero-point word as the v2
  word minus 0x11111111 (4-bit) or 0x01010101 (8-bit), word-wise as GPTQModel converts it (nibble-wise + 1 agrees
  except where a zero point of 0 borrowed from its neighbour).
- compressed-tensors pack-quantized: weight_packed [out, in * bits / 32] packed along the input, each signed code
  stored plus 2^(bits-1); weight_scale [out, groups] (group), [out, 1] (channel) or [1] (tensor); asymmetric:
  weight_zero_point [out * bits / 32, groups] packed along the output with the same offset; weight_g_idx as GPTQ's;
  w = (q - zp) * s.
- FP8 (vLLM's fp8 and compressed-tensors float-quantized): weight float8 E4M3 [out, in], weight_scale one per
  tensor or per output row; w = weight * scale (any input_scale is for FP8 activations: ours stay bf16/fp32).

Each maps exactly onto the group-wise form: mins = -z * s (exact in float32 for fp16/bf16 scales and codes below
2^8), act-order as an input permutation (`QuantWeight.perm`) so that groups are runs of consecutive columns again.
"""

import torch
from floodway.engine.quant.weights import QuantWeight

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_UNDO = [AWQ_ORDER.index(k) for k in range(8)]
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def unpack(words: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 words [..., n] -> uint8 codes [..., n * 32 / bits], the lowest bits first."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int64)
    codes = (words.to(torch.int64)[..., None] >> shifts) & (2**bits - 1)
    return codes.reshape(*words.shape[:-1], -1).to(torch.uint8)


def _check(label: str, t: torch.Tensor, shape: tuple, dtypes: tuple) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{label} has shape {list(t.shape)}, expected {list(shape)} (a corrupt checkpoint, or "
                         f"config.json's bits or group_size not the ones it was packed with)")
    if t.dtype not in dtypes:
        raise ValueError(f"{label} is {str(t.dtype).removeprefix('torch.')}, expected "
                         f"{' or '.join(str(d).removeprefix('torch.') for d in dtypes)}")


def _groups(label: str, in_f: int, group: int | None) -> int:
    group = group or in_f
    if in_f % group:
        raise ValueError(f"{label}: {in_f} input columns are not whole groups of {group} (config.json's group_size "
                         f"does not fit this checkpoint)")
    return group


def _permutation(label: str, g_idx: torch.Tensor | None, in_f: int, group: int) -> torch.Tensor | None:
    """The input order that makes each group a run of `group` consecutive columns (None: already so)."""
    if g_idx is None:
        return None
    _check(label, g_idx, (in_f,), (torch.int32, torch.int64))
    perm = torch.argsort(g_idx, stable=True)
    want = torch.arange(in_f) // group
    if not torch.equal(g_idx[perm].long(), want):
        raise ValueError(f"{label} does not give each group {group} input columns (a corrupt checkpoint, or a "
                         f"group_size other than the one it was quantized with)")
    return None if torch.equal(perm, torch.arange(in_f)) else perm


def awq(prefix: str, t: dict, out_f: int, in_f: int, group: int | None, name: str) -> QuantWeight:
    group = _groups(prefix, in_f, group)
    groups = in_f // group
    _check(f"{prefix}.qweight", t["qweight"], (in_f, out_f // 8), (torch.int32,))
    _check(f"{prefix}.qzeros", t["qzeros"], (groups, out_f // 8), (torch.int32,))
    _check(f"{prefix}.scales", t["scales"], (groups, out_f), FLOATS)

    def columns(words):  # [rows, out / 8] -> [out, rows] in output-column order
        return unpack(words, 4).reshape(words.shape[0], -1, 8)[..., _AWQ_UNDO].reshape(words.shape[0], -1).T

    s = t["scales"].float().T.contiguous()
    z = columns(t["qzeros"]).float()
    return QuantWeight(columns(t["qweight"]).contiguous(), s, -z * s, 4, group, name)


def gptq(prefix: str, t: dict, out_f: int, in_f: int, bits: int, group: int | None, zero_offset: int,
         name: str) -> QuantWeight:
    group = _groups(prefix, in_f, group)
    groups, per = in_f // group, 32 // bits
    _check(f"{prefix}.qweight", t["qweight"], (in_f // per, out_f), (torch.int32,))
    _check(f"{prefix}.qzeros", t["qzeros"], (groups, -(-out_f // per)), (torch.int32,))
    _check(f"{prefix}.scales", t["scales"], (groups, out_f), FLOATS)
    words = t["qzeros"].to(torch.int64)
    if zero_offset:  # v1: each word + 0x11111111 (4-bit) or 0x01010101 (8-bit), modulo 2^32
        words = (words + zero_offset * sum(1 << (bits * i) for i in range(per))) & 0xFFFFFFFF
    s = t["scales"].float().T.contiguous()
    z = unpack(words, bits)[:, :out_f].T.float()
    perm = _permutation(f"{prefix}.g_idx", t.get("g_idx"), in_f, group)
    codes = unpack(t["qweight"].T.contiguous(), bits)
    return QuantWeight(codes if perm is None else codes[:, perm].contiguous(), s, -z * s, bits, group, name, perm)


def packed(prefix: str, t: dict, out_f: int, in_f: int, bits: int, group: int | None, name: str) -> QuantWeight:
    group = _groups(prefix, in_f, group)
    groups, per, offset = in_f // group, 32 // bits, 2 ** (bits - 1)
    if "weight_shape" in t and [int(v) for v in t["weight_shape"]] != [out_f, in_f]:
        raise ValueError(f"{prefix}.weight_shape is {t['weight_shape'].tolist()}, the model expects {[out_f, in_f]}")
    _check(f"{prefix}.weight_packed", t["weight_packed"], (out_f, -(-in_f // per)), (torch.int32,))
    scale = t["weight_scale"]
    if group == in_f and scale.numel() == 1:  # per tensor: the one scale on every row
        scale = scale.reshape(1, 1).expand(out_f, 1)
    _check(f"{prefix}.weight_scale", scale, (out_f, groups), FLOATS)
    s = scale.float().contiguous()
    if "weight_zero_point" in t:
        _check(f"{prefix}.weight_zero_point", t["weight_zero_point"], (-(-out_f // per), groups), (torch.int32,))
        stored = unpack(t["weight_zero_point"].T.contiguous(), bits)[:, :out_f].T.float()  # zp + offset
    else:
        stored = torch.full_like(s, offset)
    # (code - offset - zp) * s = code * s - (zp + offset) * s
    perm = _permutation(f"{prefix}.weight_g_idx", t.get("weight_g_idx"), in_f, group)
    codes = unpack(t["weight_packed"], bits)[:, :in_f]
    return QuantWeight(codes if perm is None else codes[:, perm].contiguous(), s, -stored * s, bits, group, name,
                       perm)


def e4m3(prefix: str, t: dict, out_f: int, in_f: int, name: str) -> QuantWeight:
    _check(f"{prefix}.weight", t["weight"], (out_f, in_f), (torch.float8_e4m3fn,))
    scale = t["weight_scale"]
    if scale.numel() not in (1, out_f):
        raise ValueError(f"{prefix}.weight_scale has shape {list(scale.shape)}: FP8 weights load here with one scale "
                         f"per tensor or per output row ({out_f})")
    if scale.dtype not in FLOATS:
        raise ValueError(f"{prefix}.weight_scale is {str(scale.dtype).removeprefix('torch.')}, expected a float")
    s = scale.float().reshape(-1, 1).expand(out_f, 1).contiguous()
    return QuantWeight(t["weight"].view(torch.uint8), s, torch.zeros_like(s), 8, in_f, name, e4m3=True)
