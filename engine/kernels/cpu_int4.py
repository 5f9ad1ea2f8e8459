"""Our CPU int4 matmul (cpu_int4.c, built by setup.py where a C compiler is): y = x @ w.T in bfloat16 with
w = (codes - 8) * scale + zero per group of input columns, codes 0..15 (torch's int4 form), on AVX-512 BF16. Its rows
cost each their own (torch's kernel works in blocks of 4), and it ran 1.4-2.9x torch's packed int4 kernel at
SmolLM2's shapes, 1.9-2.2x over a step's linears read from memory (`python -P -m floodway.engine.bench.int4_matmul
--model-step`)."""

from typing import NamedTuple

import torch
from floodway.engine.kernels import cpu

TILE = 16  # output columns a tile of the packed codes holds (cpu_int4.c's TILE)


def pack(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """codes [N, K] in 0..15, scales and zeros [N, K // group] -> (codes [T, K/4, 32] uint8, scales and zeros
    [T, K // group, 16] bf16) for T tiles of 16 columns (the last padded with zeros). Byte 2i+e of a tile's block b
    holds q(4b+e, i) low and q(4b+2+e, i) high: the pairs (k, k+1) and (k+2, k+3) of the kernel's dot products."""
    n, k = codes.shape
    pad = -n % TILE
    c = torch.nn.functional.pad(codes.to(torch.uint8), (0, 0, 0, pad)).view(-1, TILE, k // 4, 4).transpose(1, 2)
    packed = (c[..., 0:2] | (c[..., 2:4] << 4)).reshape(-1, k // 4, 2 * TILE).contiguous()

    def per_tile(v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(v, (0, 0, 0, pad)).view(-1, TILE, v.shape[1]).transpose(1, 2) \
            .to(torch.bfloat16).contiguous()

    return packed, per_tile(scales), per_tile(zeros)


class Args(NamedTuple):
    """A weight's arguments to the kernel, in its order (cpu_module.c): addresses of `pack`'s tensors, then sizes."""
    codes: int
    scales: int
    zeros: int
    n: int
    k: int
    group: int


def args(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, n: int) -> Args:
    """The kernel's arguments for `pack`'s tensors of an [n, K] weight, made once (the caller keeps the tensors)."""
    k = packed.shape[1] * 4
    return Args(packed.data_ptr(), scales.data_ptr(), zeros.data_ptr(), n, k, k // scales.shape[1])


def matmul(x: torch.Tensor, weight: Args) -> torch.Tensor:
    """x [..., K] bf16 -> [..., n] bf16 for the weight's `args`."""
    n, k = weight.n, weight.k
    if x.shape[-1] != k:  # the kernel reads K numbers a row by address
        raise ValueError(f"int4 matmul of {x.shape[-1]} input columns with a weight of {k}")
    # A decode's [rows, K] bf16 input goes as it is: a call costs about 2 us of Python beside the kernel's 10-30.
    x2 = x if x.dim() == 2 and x.dtype == torch.bfloat16 and x.is_contiguous() else \
        x.reshape(-1, k).to(torch.bfloat16).contiguous()
    y = torch.empty(x2.shape[0], n, dtype=torch.bfloat16)
    if x2.shape[0]:
        cpu.lib.int4_matmul(x2.data_ptr(), y.data_ptr(), x2.shape[0], torch.get_num_threads(), *weight)
    return y if x2 is x else y.view(*x.shape[:-1], n)
