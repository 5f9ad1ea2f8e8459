"""One step's rows grouped by adapter slot for the batched LoRA matmul (the plan is pure; `to_device` makes it
tensors once per step, shared by every wrapped linear).

Rows of the same slot in a run longer than RUN_ROWS (a prefill chunk) are one slice: two matmuls on it, no
gather. The remaining adapter rows (decodes, short chunks) go through one padded bmm over slots 0..k-1: row j of
slot s sits at s * M + j (M: the most such rows any slot has), so the slot stacks are used as views, never gathered
per row; padding rows compute garbage that is never read back. Base-model rows (slot -1) are in neither.
"""

from dataclasses import dataclass

import torch

RUN_ROWS = 16  # a longer same-slot run is cheaper as its own slice than as padding of every other slot


@dataclass(frozen=True)
class Plan:
    runs: list[tuple[int, int, int]]  # (slot, first row, end row) sliced runs
    rows: list[int]  # the padded bmm's rows, by slot then row order
    dest: list[int]  # their positions in the [k * M] padded layout
    num_slots: int  # k
    per_slot: int  # M


def plan(row_slots: list[int], run_rows: int = RUN_ROWS) -> Plan | None:
    """None when no row uses an adapter (pure)."""
    runs, rest, start = [], [], 0
    for i in range(1, len(row_slots) + 1):
        if i == len(row_slots) or row_slots[i] != row_slots[start]:
            slot = row_slots[start]
            if slot >= 0 and i - start > run_rows:
                runs.append((slot, start, i))
            elif slot >= 0:
                rest += range(start, i)
            start = i
    if not runs and not rest:
        return None
    rest.sort(key=lambda r: row_slots[r])  # stable: row order within a slot
    counts: dict[int, int] = {}
    for r in rest:
        counts[row_slots[r]] = counts.get(row_slots[r], 0) + 1
    per_slot = max(counts.values(), default=0)
    seen: dict[int, int] = {}
    dest = []
    for r in rest:
        s = row_slots[r]
        dest.append(s * per_slot + seen.get(s, 0))
        seen[s] = seen.get(s, 0) + 1
    return Plan(runs, rest, dest, max(counts, default=-1) + 1, per_slot)


@dataclass
class DeviceBatch:
    runs: list[tuple[int, int, int]]
    rows: torch.Tensor | None  # [n] rows of x for the padded bmm (None: no such rows)
    gather: torch.Tensor | None  # [k * M] a row of x for each padded position (padding: row 0)
    dest: torch.Tensor | None  # [n] where each of `rows` sits in the padded layout
    num_slots: int
    per_slot: int
    kernel: object = None  # CUDA: kernels.lora_matmul.Segments, which the Triton kernels take instead of the above


def to_device(p: Plan, device) -> DeviceBatch:
    if torch.device(device).type == "cuda":  # imported only here: a CPU engine never imports triton
        from floodway.engine.kernels import lora_matmul

        return DeviceBatch([], None, None, None, 0, 0, lora_matmul.Segments.of(p, device))
    if not p.rows:
        return DeviceBatch(p.runs, None, None, None, 0, 0)
    gather = [0] * (p.num_slots * p.per_slot)
    for r, d in zip(p.rows, p.dest, strict=True):
        gather[d] = r
    idx = torch.tensor(p.rows + gather + p.dest, dtype=torch.long).to(device)
    n = len(p.rows)
    return DeviceBatch(p.runs, idx[:n], idx[n:n + len(gather)], idx[n + len(gather):], p.num_slots, p.per_slot)
