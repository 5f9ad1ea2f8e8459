"""Our CPU LoRA kernel (cpu_lora.c): a wrapped linear's deltas for a whole step in one call, each adapter slot's rows
together against its A and B (read once per 4 rows), B's zero blocks skipped; float32 math, x, y and the adapters in
the model's dtype (bf16 or float32). Where it is not available, lora/layers.py multiplies in torch (sliced runs and a
padded bmm)."""

import torch
from floodway.engine.kernels import cpu


class Rows:
    """One step's adapter rows as the kernel takes them, shared by every wrapped linear: the rows slot by slot, and
    each slot's (slot, first, end) into that list. Base-model rows are in none."""

    def __init__(self, runs: list[tuple[int, int, int]]):
        """runs: (slot, first row, end row) of each run of one slot's consecutive rows."""
        by_slot: dict[int, list[int]] = {}
        for slot, first, end in runs:
            by_slot.setdefault(slot, []).extend(range(first, end))
        groups, at = [], 0
        for slot, rows in by_slot.items():
            groups.append((slot, at, at + len(rows)))
            at += len(rows)
        self.rows = torch.tensor([r for rows in by_slot.values() for r in rows], dtype=torch.int32)
        self.groups = torch.tensor(groups, dtype=torch.int32).view(-1, 3)

    def add(self, y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor,
            parts: torch.Tensor) -> torch.Tensor:
        """y [T, out] += each adapter row's delta, in place; x [T, in] in y's dtype; a [S, in, W], b [S, W, out] bf16
        or float32; scale [S, 1, 1] float32; parts [P, 4] int32, each part's (first row, end row, first column, end
        column) of B. Returns y."""
        x = x.contiguous()
        assert y.is_contiguous() and x.dtype == y.dtype in (torch.bfloat16, torch.float32)
        assert a.dtype == b.dtype in (torch.bfloat16, torch.float32) and scale.dtype == torch.float32
        cpu.lib.lora_add(x.data_ptr(), y.data_ptr(), a.data_ptr(), b.data_ptr(), int(a.dtype == torch.bfloat16),
                         scale.data_ptr(), self.rows.data_ptr(), self.groups.data_ptr(), self.groups.shape[0],
                         parts.data_ptr(), parts.shape[0], a.shape[1], a.shape[2], b.shape[2],
                         int(y.dtype == torch.bfloat16), torch.get_num_threads())
        return y
