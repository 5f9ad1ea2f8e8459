"""Rotary position embedding of bf16 rows in one C call (cpu_rope.c), with the bits of llama.py's three torch ops
(x * cos, then addcmul with x's halves swapped times sin): `for_head_dim` gives it where it runs, else None."""

import torch
from floodway.engine.kernels import cpu

ALIGN = 32  # head sizes the kernel takes: each half whole 16-lane vectors


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, hd] bf16 (rows at any stride, each row contiguous), cos and sin [T, 1, hd] bf16 contiguous ->
    [T, H, hd] bf16 contiguous."""
    t, heads, dim = x.shape
    y = torch.empty(t, heads, dim, dtype=x.dtype)
    cpu.lib.rope(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(), t, heads, dim, x.stride(0))
    return y


def for_head_dim(head_dim: int, dtype: torch.dtype, device: torch.device):
    """rope where our kernel takes this head size, dtype and device, else None."""
    ours = cpu.available() and dtype == torch.bfloat16 and torch.device(device).type == "cpu" and head_dim % ALIGN == 0
    return rope if ours else None
