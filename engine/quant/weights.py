"""The one form every quantized weight takes: unsigned integer codes with a scale and an offset per group of
`group` consecutive input columns, w[n, k] = codes[n, k] * scales[n, k // group] + mins[n, k // group].

Every format we load maps into it exactly: GGUF Q4_1 is this form itself (d, m), Q4_0 is d * (q - 8) (min -8d),
Q8_0 is d * q with q signed (codes q + 128, min -128d); fp16 scales and their small multiples are exact in the
float32 kept here; Hugging Face checkpoints map as hf_decode.py says. Two extensions: `perm`, an input permutation
(GPTQ's act-order: codes[:, j] is input column perm[j], so y = x[:, perm] @ codes-weight.T), and `e4m3`, codes
that are FP8 E4M3 bit patterns (w = fp8(codes) * scale, one scale per row). Merging projections (q/k/v, gate/up)
stacks rows, so groups never straddle two of them.
"""

from dataclasses import dataclass, replace

import torch

# RTN's group: GGUF's block size, and on the CPU int4 kernel's smallest group it ran no slower than 128.
RTN_GROUP = 32


@dataclass
class QuantWeight:
    codes: torch.Tensor  # uint8 [out, in], each < 2**bits
    scales: torch.Tensor  # float32 [out, in // group]
    mins: torch.Tensor  # float32 [out, in // group]
    bits: int  # 4 or 8
    group: int
    name: str  # the format, for logs: "Q4_1", "int4", ...
    perm: torch.Tensor | None = None  # int64 [in]: the input column each code column holds (None: in order)
    e4m3: bool = False  # codes are FP8 E4M3 bit patterns, not integers

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [out, in]: the reference every kernel is tested against."""
        s = self.scales.repeat_interleave(self.group, 1)
        m = self.mins.repeat_interleave(self.group, 1)
        values = self.codes.view(torch.float8_e4m3fn).float() if self.e4m3 else self.codes.float()
        w = values * s + m
        return w if self.perm is None else w[:, torch.argsort(self.perm)]

    def rows(self, index: torch.Tensor) -> "QuantWeight":
        return replace(self, codes=self.codes[index], scales=self.scales[index], mins=self.mins[index])


def kind(w: QuantWeight) -> tuple:
    """What weights must share to merge into one linear."""
    return w.bits, w.group, w.name, w.e4m3


def merge(parts: list[QuantWeight]) -> QuantWeight:
    """The weights stacked by rows (one linear computing the parts' outputs side by side)."""
    first = parts[0]
    if any(kind(p) != kind(first) for p in parts):
        raise ValueError(f"cannot merge projections quantized differently: {sorted({p.name for p in parts})}")
    if any(not _same(p.perm, first.perm) for p in parts):
        # they share one input, so one permutation; GPTQ gives projections of one input the same act-order
        raise ValueError(f"cannot merge {first.name} projections whose act-order (g_idx) permutes their shared input "
                         f"differently")
    return replace(first, codes=torch.cat([p.codes for p in parts]), scales=torch.cat([p.scales for p in parts]),
                   mins=torch.cat([p.mins for p in parts]))


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return a is b or (a is not None and b is not None and torch.equal(a, b))


def regroup(w: QuantWeight, group: int) -> QuantWeight:
    """The same weight with groups of `group` columns, dividing its own: each scale and min repeated (exact)."""
    return replace(w, scales=w.scales.repeat_interleave(w.group // group, 1),
                   mins=w.mins.repeat_interleave(w.group // group, 1), group=group)


def spread(w: QuantWeight, group: int) -> QuantWeight:
    """The same weight over groups of `group` columns, a multiple of its own: each group's codes followed by zero
    codes, scales and mins unchanged. Exact where the input has zeros at the added columns (`spread_inputs`)."""
    out_f, in_f = w.shape
    pad = torch.zeros(out_f, in_f // w.group, group - w.group, dtype=w.codes.dtype)
    return replace(w, codes=torch.cat([w.codes.view(out_f, -1, w.group), pad], -1).reshape(out_f, -1), group=group)


def spread_inputs(x: torch.Tensor, group: int, to: int) -> torch.Tensor:
    """x [T, in] with `to - group` zero columns after each `group` columns, as `spread` lays out the codes."""
    t, in_f = x.shape
    chunks = x.view(t, in_f // group, group)
    return torch.cat([chunks, chunks.new_zeros(t, in_f // group, to - group)], -1).view(t, -1)


def rtn(weight: torch.Tensor, bits: int, group: int = RTN_GROUP) -> QuantWeight:
    """Round-to-nearest group-wise: int8 symmetric (Q8_0's rule: scale absmax / 127), int4 asymmetric (Q4_1's:
    the group's min and (max - min) / 15)."""
    out_f, in_f = weight.shape
    if in_f % group:
        raise ValueError(f"int{bits} group-wise quantization needs in_features divisible by {group}, got {in_f}")
    w = weight.detach().float().reshape(out_f, in_f // group, group)
    if bits == 8:
        scale = w.abs().amax(-1) / 127
        low = -128 * scale
    elif bits == 4:
        low, high = w.amin(-1), w.amax(-1)
        scale = (high - low) / 15
    else:
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: every code 0 or its midpoint
    codes = torch.round((w - low[..., None]) / safe[..., None]).clamp_(0, 2**bits - 1).to(torch.uint8)
    return QuantWeight(codes.reshape(out_f, in_f), scale, low, bits, group, f"int{bits}")


E4M3_MAX = 448.0  # the largest finite FP8 E4M3 value


def fp8(weight: torch.Tensor) -> QuantWeight:
    """FP8 E4M3 per output row at load (--quantization fp8 on a float checkpoint): scale absmax / 448, each weight
    rounded to the nearest E4M3 value by torch's cast."""
    w = weight.detach().float()
    scale = w.abs().amax(1, keepdim=True) / E4M3_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row: codes 0
    codes = (w / safe).to(torch.float8_e4m3fn).view(torch.uint8)
    return QuantWeight(codes, scale, torch.zeros_like(scale), 8, w.shape[1], "fp8", e4m3=True)
