"""Quantized linears and the choice of their kernel, made once at load per device.

Every linear a model calls (float `nn.Linear`, `packed_linear.PackedLinear`, or the classes here) maps x [T, in] to
[T, out] and has `in_features`, `out_features`, and `kernel` (a name for the startup log and /debug/engine;
`kernel_of` names the float ones). A per-row LoRA delta can wrap any of them from outside: y = base(x) + delta(x).

CPU: int4 and int8 matmuls in bfloat16, ours (`kernels/cpu_quant_matmul.c`, AVX-512 BF16) where the CPU has it,
else torch's packed int4 one (`_weight_int4pack_mm_for_cpu`, whose float32 path runs several times slower than a
float32 matmul: float32 is refused rather than served slowly), to which int8 codes go split into their high and low
nibbles, two int4 weights side by side along the input (x repeated), which keeps int8's group-wise scales exact in one
call; torch's own int8 kernel (`_weight_int8pack_mm`) takes one scale per output row only, so it cannot hold Q8_0.
CUDA: our Triton kernel (`kernels/quant_matmul.py`) dequantizes each tile in the GEMM.

Groups: a checkpoint's group (or one group per row) is served as the largest of CPU_GROUPS dividing it, its scales
repeated (exact). Groups of 16 (GGUF's Q2_K, Q3_K, Q6_K) are taken by the Triton kernel as they are; on CPU each is
spread over 32 columns, the other 16 zero codes against zero inputs (exact, at twice a group of 32's work: no smaller
group on the packed kernel). Act-order weights (`QuantWeight.perm`) gather their input columns first. FP8 E4M3 is served
on CUDA only: no CPU kernel multiplies FP8 weights by bf16/fp32 activations (torch's _scaled_mm on CPU wants FP8
activations too, which changes the numbers, and ran 80x slower than a bf16 matmul), and converting the weights per step
measured 8x (a 256-entry table) to 50x (torch's cast) a bf16 matmul at SmolLM2's decode shapes, one thread: slower than
float weights, which is no reason to quantize. So FP8 on CPU is refused, naming int8 (one byte per weight, on the packed
kernel) and a GPU.
"""

import torch
from floodway.engine.kernels import cpu, cpu_quant_matmul
from floodway.engine.quant import weights
from floodway.engine.quant.formats import Unsupported
from floodway.engine.quant.weights import QuantWeight
from torch import nn

CPU_GROUPS = (32, 64, 128, 256)  # the groups the CPU kernels take
SPREAD_GROUP = 16  # served spread over CPU_GROUPS[0] columns on CPU
NO_QUANTIZATION = "--quantization none"
CPU_INT4 = "ours" if cpu.available() else "torch"  # the CPU kernel: ours (AVX-512 BF16) or torch's


def served_group(group: int) -> int | None:
    """The group a weight grouped by `group` columns is served with (pure): the largest of CPU_GROUPS dividing it."""
    return next((g for g in reversed(CPU_GROUPS) if group % g == 0), None)


def check(name: str, bits: int, group: int | None, device: torch.device, dtype: torch.dtype, e4m3: bool = False,
          alternative: str = NO_QUANTIZATION) -> None:
    """Raises Unsupported naming the format and the alternative where no kernel here serves it (pure). group None:
    one group per row, whose width the checkpoint's shapes tell later."""
    if device.type == "cpu":
        if e4m3:
            raise Unsupported(f"{name} weights have no CPU kernel here (converting FP8 per step measured 8-50x a bf16 "
                              f"matmul, slower than float weights): serve them on a GPU (our Triton kernel), or "
                              f"quantize a float checkpoint with --quantization int8 (one byte per weight, on a "
                              f"CPU kernel)")
        if dtype != torch.bfloat16:
            raise Unsupported(f"{name} weights on CPU compute in bfloat16 (torch's packed int4 kernel has no fast "
                              f"{str(dtype).removeprefix('torch.')} path): use --dtype bfloat16 (or auto), or "
                              f"{alternative}")
    elif device.type == "cuda":
        from floodway.engine import attention

        if not attention.KERNELS_AVAILABLE:
            raise Unsupported(f"{name} weights on CUDA need triton (our dequantizing GEMM), which is not installed: "
                              f"install triton, or use {alternative}")
    else:
        raise Unsupported(f"no {name} kernel on {device.type}: use {alternative}")
    if group is not None and served_group(group) is None and group != SPREAD_GROUP:
        raise Unsupported(f"{name} has groups of {group} columns; our kernels take groups of {SPREAD_GROUP} or "
                          f"{CPU_GROUPS} columns or multiples of them: use {alternative}")
    if bits not in (4, 8):
        raise Unsupported(f"{name}: {bits}-bit codes have no kernel here (4 and 8 do): use {alternative}")


def make(w: QuantWeight, bias: torch.Tensor | None, device: torch.device, dtype: torch.dtype) -> nn.Module:
    check(w.name, w.bits, w.group, device, dtype, w.e4m3)
    if served_group(w.group) not in (w.group, None):
        w = weights.regroup(w, served_group(w.group))
    if device.type == "cpu":
        spread = w.group if w.group == SPREAD_GROUP else None
        if spread:
            w = weights.spread(w, CPU_GROUPS[0])
        return CpuLinear(w, bias, dtype, spread)
    return TritonLinear(w, bias, device, dtype)


def _inputs(x: torch.Tensor, perm: torch.Tensor | None, spread: int | None = None) -> torch.Tensor:
    """x's columns in the order the codes hold them (act-order weights), with the zero columns of a spread weight."""
    x = x if perm is None else x.index_select(-1, perm)
    return x if spread is None else weights.spread_inputs(x, spread, CPU_GROUPS[0])


def row_tile(model: nn.Module) -> int:
    """The row block of the model's linear kernels: a matmul of rows up to a multiple of it costs about what the
    multiple does (1: rows cost each their own)."""
    return max((getattr(m, "ROW_TILE", 1) for m in model.modules()), default=1)


def kernel_of(module: nn.Module) -> str:
    """The kernel name of any linear the model calls."""
    if hasattr(module, "kernel"):
        return module.kernel
    if type(module).__name__ == "PackedLinear":
        return f"onednn packed {str(module.packed.dtype).removeprefix('torch.')}"
    return f"F.linear {str(module.weight.dtype).removeprefix('torch.')}"


# Rows packed at a time by torch's packer. It takes int32 codes, 4 bytes a weight: the tied head of SmolLM2 alone was
# 226 MB at once, the load's peak. Its layout interleaves rows within blocks of 64, so chunks of a multiple of 64 pack
# the same.
PACK_ROWS = 4096


def _centred(codes: torch.Tensor, bits: int) -> tuple[torch.Tensor, int]:
    """(codes + c, c): c centres codes that use fewer than `bits` bits (GGUF's 2-, 3-, 5- and 6-bit ones) on
    2^(bits - 1), the kernels' own offset, so that the bf16-rounded scale and zero they multiply are not large
    terms that cancel (uncentred, 5-bit codes on the int8 path measured 10x Q8_0's error). Still below 2^bits."""
    used = int(codes.max()).bit_length()
    c = (1 << bits - 1) - (1 << used) // 2 if used < bits else 0
    return codes + c, c


class CpuLinear(nn.Module):
    """int4 or int8 codes on our kernel (cpu_quant_matmul.py) where this CPU has AVX-512 BF16 and it was built, else on
    torch's packed int4 one (w = (q - 8) * scale + zero in bf16), int8 as its high and low nibbles there: two int4
    weights side by side along the input (x repeated), s * q + m = [16 s * hi + m] + [s * lo]. Torch's kernel
    multiplies rows in blocks of 4, unpacking the weights once per block: a fifth row costs about a whole block, and
    speculation prices drafts by ROW_TILE."""

    def __init__(self, w: QuantWeight, bias: torch.Tensor | None, dtype: torch.dtype, spread: int | None = None):
        """spread: the weight's own group where `weights.spread` laid it over w.group columns (None: not spread)."""
        super().__init__()
        self.out_features, in_f = w.shape
        self.in_features = in_f if spread is None else in_f // w.group * spread
        self.bits, self.group, self.perm, self.spread = w.bits, w.group, w.perm, spread
        self.bias = None if bias is None else bias.detach().to(dtype)
        self.ours = CPU_INT4 == "ours"
        codes, c = _centred(w.codes, w.bits)  # s * (q + c) + (m - c s)
        scales, mins = w.scales, w.mins - c * w.scales
        # Both kernels take w = (q - 2^(bits-1)) * scale + zero.
        self.split = w.bits == 8 and not self.ours  # int8 as two nibble planes on torch's kernel
        if self.split:
            codes, scales, mins = torch.cat([codes >> 4, codes & 15], 1), torch.cat([16 * scales, scales], 1), \
                torch.cat([mins, torch.zeros_like(mins)], 1)
        bits = 4 if self.split else w.bits
        zeros = mins + (1 << bits - 1) * scales
        if self.ours:
            self.ROW_TILE = 1
            self.packed, self.scales, self.zeros = cpu_quant_matmul.pack(codes, scales, zeros, bits)
            if bits == 8 and not self.zeros.any():  # Q8_0's: the kernel skips the zeros' term, so none are kept
                self.zeros = None
            self.kernel_args = cpu_quant_matmul.args(self.packed, self.scales, self.zeros, self.out_features, bits)
        else:
            self.ROW_TILE = 4
            self.packed = torch.cat([torch.ops.aten._convert_weight_to_int4pack_for_cpu(rows.to(torch.int32)
                                                                                       .contiguous(), 1)
                                     for rows in codes.split(PACK_ROWS)])
            self.scale_zero = torch.stack([scales, zeros], -1).transpose(0, 1).to(dtype).contiguous()
        name = cpu_quant_matmul.name(w.bits) if self.ours else "aten._weight_int4pack_mm_for_cpu"
        note = (", int8 as two nibble planes" if self.split else "") + \
            (f", groups of {spread} spread over {w.group}" if spread else "")
        self.kernel = f"{name} ({w.name}, group {w.group}{note})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _inputs(x, self.perm, self.spread)
        if self.ours:
            y = cpu_quant_matmul.matmul(x, self.kernel_args)
        else:
            x = torch.cat([x, x], -1) if self.split else x
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group, self.scale_zero)
        return y if self.bias is None else y + self.bias


class Stacked(nn.Module):
    """Linears reading one input, their outputs side by side: projections a file quantized differently, which no one
    kernel call takes together."""

    def __init__(self, parts: list[nn.Module]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.in_features = parts[0].in_features
        self.out_features = sum(p.out_features for p in parts)
        self.kernel = " + ".join(kernel_of(p) for p in parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([p(x) for p in self.parts], -1)


class TritonLinear(nn.Module):
    def __init__(self, w: QuantWeight, bias: torch.Tensor | None, device: torch.device, dtype: torch.dtype):
        from floodway.engine.kernels import quant_matmul

        super().__init__()
        self.out_features, self.in_features = w.shape
        self.bits, self.group, self.e4m3 = w.bits, w.group, w.e4m3
        self.codes = quant_matmul.pack_codes(w.codes, w.bits).to(device)
        self.scales, self.mins = w.scales.to(device), w.mins.to(device)
        self.perm = None if w.perm is None else w.perm.to(device)
        self.bias = None if bias is None else bias.detach().to(device, dtype)
        self.kernel = f"triton dequantizing GEMM ({w.name}, group {w.group})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from floodway.engine.kernels import quant_matmul

        return quant_matmul.matmul(_inputs(x, self.perm), self.codes, self.scales, self.mins, self.bits, self.group,
                                   self.bias, self.e4m3)


class QuantEmbedding(nn.Module):
    """Token embedding rows gathered from codes and dequantized (the tied head's weight read once, not kept twice
    in float)."""

    def __init__(self, w: QuantWeight, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.codes, self.scales, self.mins = w.codes.to(device), w.scales.to(device), w.mins.to(device)
        self.group, self.dtype = w.group, dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = QuantWeight(self.codes[ids], self.scales[ids], self.mins[ids], 0, self.group, "").dequantize()
        return rows.to(self.dtype)
