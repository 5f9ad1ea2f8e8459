"""Our CPU quantized matmul (cpu_quant_matmul.c, built by setup.py where a C compiler is): y = x @ w.T in bfloat16 with
w = (codes - 2^(bits-1)) * scale + zero per group of input columns, codes of 4 bits (0..15, torch's int4 form) or 8
(0..255), on AVX-512 BF16. Its rows cost each their own (torch's int4 kernel works in blocks of 4), and at 4 bits it
ran 1.4-2.9x torch's packed int4 kernel at SmolLM2's shapes, 1.9-2.2x over a step's linears read from memory
(`python -P -m floodway.engine.bench.int4_matmul --model-step`)."""

from typing import NamedTuple

import torch
from floodway.engine.kernels import cpu

TILE = 16  # output columns a tile of the packed codes holds (cpu_quant_matmul.c's TILE)


def float32_products(vendor: str) -> bool:
    """Whether the kernel multiplies codes and inputs as float32 (vfmadd231ps, 16 a call) rather than as bf16 pairs
    (vdpbf16ps, 32 a call), by the CPU's maker: an Intel Xeon (Emerald Rapids) ran vdpbf16ps at a quarter of
    vfmadd231ps's calls a second, so half its multiply-adds, which bound a speculative verify's rows there; the AMD
    EPYC the bf16 pairs were tuned on keeps them (docs/benchmarks/2026-12-08-float32-products.md)."""
    return vendor == "intel"


FMA = cpu.lib is not None and float32_products(cpu.lib.vendor())  # this machine's products


def name(bits: int) -> str:
    """The kernel's name in the startup log and /debug/engine."""
    return f"floodway avx512 int{bits} matmul, {'float32 products' if FMA else 'bf16 pairs'}"


def pack(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int) -> tuple[torch.Tensor, ...]:
    """codes [N, K] of `bits` (4 or 8), scales and zeros [N, K // group] -> (codes [T, K * bits / 32, 32] uint8,
    scales and zeros [T, K // group, 16] bf16) for T tiles of 16 columns (the last padded with zeros). 4 bits: byte
    2i+e of a tile's block b holds q(4b+e, i) low and q(4b+2+e, i) high, the pairs (k, k+1) and (k+2, k+3) of the
    kernel's dot products. 8 bits: byte 2i+e of block b holds q(2b+e, i) - 128 as an int8, the pair (k, k+1)."""
    n, k = codes.shape
    pad = -n % TILE
    per = 16 // bits  # input columns a 32-byte block holds
    c = torch.nn.functional.pad(codes.to(torch.uint8), (0, 0, 0, pad)).view(-1, TILE, k // per, per).transpose(1, 2)
    if bits == 4:
        packed = c[..., 0:2] | (c[..., 2:4] << 4)
    else:
        packed = (c.to(torch.int16) - 128).to(torch.int8).view(torch.uint8)
    packed = packed.reshape(-1, k // per, 2 * TILE).contiguous()

    def per_tile(v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(v, (0, 0, 0, pad)).view(-1, TILE, v.shape[1]).transpose(1, 2) \
            .to(torch.bfloat16).contiguous()

    return packed, per_tile(scales), per_tile(zeros)


class Args(NamedTuple):
    """A weight's arguments to the kernel, in its order (cpu_module.c): addresses of `pack`'s tensors (zeros 0 where
    there are none), then sizes."""
    codes: int
    scales: int
    zeros: int
    n: int
    k: int
    group: int
    bits: int
    fma: bool


def args(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, n: int, bits: int,
         fma: bool | None = None) -> Args:
    """The kernel's arguments for `pack`'s tensors of an [n, K] weight, made once (the caller keeps the tensors).
    zeros None: all zero, not read (8 bits only: the 4-bit sums need the zero's term). fma: float32 products (a row's
    result then differs from the bf16 pairs' in its last bits); None: this machine's (FMA)."""
    if zeros is None and bits != 8:
        raise ValueError("4-bit codes need their zeros")
    k = packed.shape[1] * (16 // bits)
    return Args(packed.data_ptr(), scales.data_ptr(), 0 if zeros is None else zeros.data_ptr(), n, k,
                k // scales.shape[1], bits, FMA if fma is None else fma)


def matmul(x: torch.Tensor, weight: Args) -> torch.Tensor:
    """x [..., K] bf16 -> [..., n] bf16 for the weight's `args`."""
    n, k = weight.n, weight.k
    if x.shape[-1] != k:  # the kernel reads K numbers a row by address
        raise ValueError(f"quantized matmul of {x.shape[-1]} input columns with a weight of {k}")
    # A decode's [rows, K] bf16 input goes as it is: a call costs about 2 us of Python beside the kernel's 10-30.
    x2 = x if x.dim() == 2 and x.dtype == torch.bfloat16 and x.is_contiguous() else \
        x.reshape(-1, k).to(torch.bfloat16).contiguous()
    y = torch.empty(x2.shape[0], n, dtype=torch.bfloat16)
    if x2.shape[0]:
        cpu.lib.quant_matmul(x2.data_ptr(), y.data_ptr(), x2.shape[0], torch.get_num_threads(), *weight)
    return y if x2 is x else y.view(*x.shape[:-1], n)
