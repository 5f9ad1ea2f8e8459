"""RMSNorm of bf16 rows in one C call (cpu_norm.c), with torch's bits: `for_width` gives it for a row width only where
it reproduced F.rms_norm exactly on random rows (its sum of squares follows torch's order, which a torch build could
change), else None and the caller keeps F.rms_norm."""

import torch
import torch.nn.functional as F
from floodway.engine.kernels import cpu

ALIGN = 32  # the kernel's row widths: multiples of its 4 accumulators of 8 lanes
# Random numbers compared with F.rms_norm at load: another order moves a few of them (7 of 3,000 rows of 576).
CHECK_NUMBERS = 1 << 21


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, N] bf16 contiguous, weight [N] bf16 -> [T, N] bf16."""
    y = torch.empty_like(x)
    cpu.lib.rms_norm(x.data_ptr(), weight.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], eps)
    return y


def for_width(weight: torch.Tensor, eps: float):
    """rms_norm for rows of weight's width where the kernel runs here and gives F.rms_norm's bits on random rows of
    every scale (tried once, at load), else None."""
    n = weight.shape[0]
    if not cpu.available() or weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or n % ALIGN:
        return None
    g = torch.Generator().manual_seed(0)
    rows = CHECK_NUMBERS // n
    x = (torch.randn(rows, n, generator=g) * torch.logspace(-3, 3, rows)[:, None]).to(torch.bfloat16)
    w = weight.detach().contiguous()
    return rms_norm if torch.equal(rms_norm(x, w, eps), F.rms_norm(x, (n,), w, eps)) else None
