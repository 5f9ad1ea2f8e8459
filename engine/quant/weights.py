"""The one form every quantized weight takes: unsigned integer codes with a scale and an offset per group of
`group` consecutive input columns, w[n, k] = codes[n, k] * scales[n, k // group] + mins[n, k // group].

Every format we load maps into it exactly: GGUF Q4_1 is this form itself (d, m), Q4_0 is d * (q - 8) (min -8d),
Q8_0 is d * q with q signed (codes q + 128, min -128d); fp16 scales and their small multiples are exact in the
float32 kept here. Merging projections (q/k/v, gate/up) stacks rows, so groups never straddle two of them.
"""

from dataclasses import dataclass

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

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [out, in]: the reference every kernel is tested against."""
        s = self.scales.repeat_interleave(self.group, 1)
        m = self.mins.repeat_interleave(self.group, 1)
        return self.codes.float() * s + m

    def rows(self, index: torch.Tensor) -> "QuantWeight":
        return QuantWeight(self.codes[index], self.scales[index], self.mins[index], self.bits, self.group, self.name)


def merge(parts: list[QuantWeight]) -> QuantWeight:
    """The weights stacked by rows (one linear computing the parts' outputs side by side)."""
    first = parts[0]
    if any((p.bits, p.group, p.name) != (first.bits, first.group, first.name) for p in parts):
        raise ValueError(f"cannot merge projections quantized differently: {sorted({p.name for p in parts})}")
    return QuantWeight(torch.cat([p.codes for p in parts]), torch.cat([p.scales for p in parts]),
                       torch.cat([p.mins for p in parts]), first.bits, first.group, first.name)


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
