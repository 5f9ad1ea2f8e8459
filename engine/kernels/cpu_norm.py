"""Our CPU RMSNorm (cpu_norm.c): F.rms_norm's arithmetic in one call a norm, for bf16 and float32 rows."""

import torch
from floodway.engine.kernels import cpu


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, D] and w [D] of one dtype (bfloat16 or float32) -> x normalized per row, times w."""
    x = x.contiguous()
    assert x.dim() == 2 and w.dtype == x.dtype in (torch.bfloat16, torch.float32) and w.is_contiguous()
    y = torch.empty_like(x)
    cpu.lib.rms_norm(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], eps,
                     int(x.dtype == torch.bfloat16), torch.get_num_threads())
    return y
