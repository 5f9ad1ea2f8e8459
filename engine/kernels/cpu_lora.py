"""Our CPU LoRA kernel (cpu_lora.c): a wrapped linear's deltas for a whole step in one call, each adapter slot's rows
together against its A and B (read once per 4 rows), the adapters packed as it reads them (B without its zero
blocks), x, y and the adapters in the model's dtype (bf16 or float32), sums in float32. Where it is not available,
lora/layers.py multiplies in torch (sliced runs and a padded bmm)."""

import torch
import torch.nn.functional as F
from floodway.engine.kernels import cpu

PANEL = 64  # lanes of B one pass of the kernel reads (its 4 x 16-lane accumulators a row)


def _pair(dtype: torch.dtype) -> int:
    return 2 if dtype == torch.bfloat16 else 1  # bf16 lanes hold two rows' numbers (vdpbf16ps's pairs)


def _blocks(parts: list[tuple[int, int, int, int]], pair: int):
    """Each part's (rows, columns) as stored: rows rounded up to whole pairs, columns to whole panels."""
    return [(-(-(r1 - r0) // pair) * pair, -(-(c1 - c0) // PANEL) * PANEL) for r0, r1, c0, c1 in parts]


def packed_sizes(n_in: int, parts: list[tuple[int, int, int, int]], dtype: torch.dtype) -> tuple[int, int]:
    """Numbers in one slot's packed A and B."""
    pair = _pair(dtype)
    return -(-n_in // pair) * pair * parts[-1][1], sum(r * c for r, c in _blocks(parts, pair))


def pack(a: torch.Tensor, b: torch.Tensor, parts: list[tuple[int, int, int, int]]) -> tuple[torch.Tensor, ...]:
    """One adapter's A [in, W] and B [W, out] as the kernel reads them (cpu_lora.c): rows of 32-bit lanes (bf16: a
    pair of two consecutive rows' numbers a lane, an odd last row paired with zeros); of B only each part's block
    (rows [r0, r1), columns [c0, c1)), part after part, each cut into panels of PANEL columns (the last
    zero-padded), a panel its rows one after the other."""
    pair = _pair(a.dtype)
    a = F.pad(a, (0, 0, 0, -a.shape[0] % pair))
    out = [a.view(-1, pair, a.shape[1]).transpose(1, 2).reshape(-1)]
    for (r0, r1, c0, c1), (rows, cols) in zip(parts, _blocks(parts, pair), strict=True):
        block = F.pad(b[r0:r1, c0:c1], (0, cols - (c1 - c0), 0, rows - (r1 - r0)))
        out.append(block.view(rows // pair, pair, cols // PANEL, PANEL).permute(2, 0, 3, 1).reshape(-1))
    return out[0], torch.cat(out[1:])


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
        # the kernel's per-step arguments, made once: a step calls it on every wrapped linear
        self.args = (self.rows.data_ptr(), self.groups.data_ptr(), len(groups), torch.get_num_threads())

    def add(self, y: torch.Tensor, x: torch.Tensor, lin) -> torch.Tensor:
        """y [T, out] += each adapter row's delta, in place; x [T, in] in y's dtype; lin: the LoRALinear, its
        `kernel_args` its stacks' (`pack`ed, in the model's dtype). Returns y."""
        x = x.contiguous()
        assert y.is_contiguous() and x.dtype == y.dtype
        cpu.lib.lora_add(x.data_ptr(), y.data_ptr(), int(y.dtype == torch.bfloat16), *lin.kernel_args, *self.args)
        return y
