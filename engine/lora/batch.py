"""One step's rows grouped by adapter slot for the batched LoRA matmul (the plan is pure; `to_device` makes it
tensors once per step, shared by every wrapped linear).

A run is a stretch of consecutive rows of one slot (a prefill chunk, a decode row). A sliced run costs two matmuls
on its rows, no gather, and reads only its own slot's weights. The rest go through one padded bmm over slots
0..k-1: row j of slot s sits at s * M + j (M: the most such rows any slot has), so the slot stacks are used as
views, never gathered per row; it reads all k slots' weights, padding rows compute garbage that is never read back.
So runs longer than RUN_ROWS are always sliced, and the short ones too when they are few against the slots the
padded bmm would read (decodes spread over few of many resident adapters). Base-model rows (slot -1) are in neither.
"""

from dataclasses import dataclass

import torch
from floodway.engine.kernels import cpu, cpu_lora

# On CPU our kernel (kernels/cpu_lora.c) takes every run in one call per linear, so no run is padded (and the layers
# keep A and B packed for it alone); torch's calls below serve where it is not available.
CPU_KERNEL = cpu.available()
RUN_ROWS = 16  # a longer same-slot run is cheaper as its own slice than as padding of every other slot
# Short runs are all sliced when runs x SLICE_COST < slots read by the padded bmm: on CPU a one-row slice cost about
# 4/3 of one slot's share of the padded bmm (both read the slot's weights; the slice makes two calls of its own).
SLICE_COST = 4 / 3


@dataclass(frozen=True)
class Plan:
    runs: list[tuple[int, int, int]]  # (slot, first row, end row) sliced runs
    rows: list[int]  # the padded bmm's rows, by slot then row order
    dest: list[int]  # their positions in the [k * M] padded layout
    num_slots: int  # k
    per_slot: int  # M


def _runs(row_slots: list[int]) -> list[tuple[int, int, int]]:
    """(slot, first row, end row) of each stretch of consecutive rows of one adapter slot (base rows left out)."""
    out, start = [], 0
    for i in range(1, len(row_slots) + 1):
        if i == len(row_slots) or row_slots[i] != row_slots[start]:
            if row_slots[start] >= 0:
                out.append((row_slots[start], start, i))
            start = i
    return out


def run_rows(device) -> int:
    """The plan's run_rows on `device`: 0 (every run sliced) where our CPU kernel takes the runs."""
    return 0 if CPU_KERNEL and torch.device(device).type == "cpu" else RUN_ROWS


def plan(row_slots: list[int], run_rows: int = RUN_ROWS) -> Plan | None:
    """None when no row uses an adapter (pure). run_rows 0: every run sliced."""
    runs = _runs(row_slots)
    if not runs:
        return None
    short = [r for r in runs if r[2] - r[1] <= run_rows]
    if not short or len(short) * SLICE_COST < max(s for s, _, _ in short) + 1:
        return Plan(runs, [], [], 0, 0)
    rest = sorted((i for _, a, b in short for i in range(a, b)), key=lambda r: row_slots[r])  # stable: row order
    counts: dict[int, int] = {}
    for r in rest:
        counts[row_slots[r]] = counts.get(row_slots[r], 0) + 1
    per_slot = max(counts.values())
    seen: dict[int, int] = {}
    dest = []
    for r in rest:
        s = row_slots[r]
        dest.append(s * per_slot + seen.get(s, 0))
        seen[s] = seen.get(s, 0) + 1
    return Plan([r for r in runs if r[2] - r[1] > run_rows], rest, dest, max(counts) + 1, per_slot)


@dataclass
class DeviceBatch:
    runs: list[tuple[int, int, int]]
    rows: torch.Tensor | None  # [n] rows of x for the padded bmm (None: no such rows)
    gather: torch.Tensor | None  # [k * M] a row of x for each padded position (padding: row 0)
    dest: torch.Tensor | None  # [n] where each of `rows` sits in the padded layout
    num_slots: int
    per_slot: int
    kernel: object = None  # lora_matmul.Segments (CUDA) or cpu_lora.Rows, which the kernels take instead of the above
    scales: list[float] | None = None  # each slot's alpha / r, for the sliced runs' addmm


def to_device(p: Plan, device, scale: torch.Tensor) -> DeviceBatch:
    """The plan's tensors on `device`; `scale` is the slots' [S, 1, 1] alpha / r (the layers' `Slots.scale`)."""
    if torch.device(device).type == "cuda":  # imported only here: a CPU engine never imports triton
        from floodway.engine.kernels import lora_matmul

        return DeviceBatch([], None, None, None, 0, 0, lora_matmul.Segments.of(p, device))
    if CPU_KERNEL and torch.device(device).type == "cpu":  # every row (a plan made with run_rows(device) pads none)
        one_row = [(d // p.per_slot, r, r + 1) for r, d in zip(p.rows, p.dest, strict=True)]
        return DeviceBatch([], None, None, None, 0, 0, cpu_lora.Rows(p.runs + one_row))
    scales = scale.view(-1).tolist() if p.runs else None
    if not p.rows:
        return DeviceBatch(p.runs, None, None, None, 0, 0, scales=scales)
    gather = [0] * (p.num_slots * p.per_slot)
    for r, d in zip(p.rows, p.dest, strict=True):
        gather[d] = r
    idx = torch.tensor(p.rows + gather + p.dest, dtype=torch.long).to(device)
    n = len(p.rows)
    return DeviceBatch(p.runs, idx[:n], idx[n:n + len(gather)], idx[n + len(gather):], p.num_slots, p.per_slot,
                       scales=scales)
