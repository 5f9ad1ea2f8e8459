"""The batched LoRA delta on CUDA (Triton): y[r] += (x[r] @ A[s]) @ B[s] * scale[s] for every row r whose adapter
slot s is not -1, the rows of every adapter in one launch (a gathered segment matmul, as Punica and S-LoRA do).

The weights as engine/lora/layers.py keeps them: A [S, in, W], B [S, W, out] (W = parts x --max-lora-rank, a
smaller rank zero-padded, so the padding adds exact zeros), scale float32 [S, 1, 1]. The step's adapter rows come
grouped by slot (`Segments`): slot s's rows of x are rows[starts[s]:starts[s + 1]]; base-model rows are in none.
Two kernels: shrink writes t = x[rows] @ A[s] in float32 [n, W] (W tiles side by side), expand adds
t @ B[s] * scale[s] into y's rows in place (each row is in one segment, so no two programs write a row). A program
takes one slot's tile of rows, so one A or B tile serves all of them; programs past their slot's rows return at
once (the grid is sized by the slot with the most rows).
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}
BLOCK_K = 64  # shrink: the input's tile along K
BLOCK_N = 64  # expand: the output's tile along N
MAX_BLOCK_W = 64  # the tile along W (parts x rank): rank 16 on q/k/v (48) in one, any rank in a bounded tile


@triton.jit
def _shrink_kernel(x, a, rows, starts, t, K, W, stride_xm, stride_as, stride_ak, stride_tm,
                   DOT: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    slot = tl.program_id(2)
    end = tl.load(starts + slot + 1)
    first = tl.load(starts + slot) + tl.program_id(0) * BLOCK_M
    if first >= end:
        return
    pos = first + tl.arange(0, BLOCK_M)  # positions in the slot-grouped order
    m_ok = pos < end
    r = tl.load(rows + pos, mask=m_ok, other=0).to(tl.int64)
    rw = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    w_ok = rw < W
    rk = tl.arange(0, BLOCK_K)
    a_slot = a + slot.to(tl.int64) * stride_as
    acc = tl.zeros((BLOCK_M, BLOCK_W), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        k_ok = k < K
        xs = tl.load(x + r[:, None] * stride_xm + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        ws = tl.load(a_slot + k[:, None] * stride_ak + rw[None, :], mask=k_ok[:, None] & w_ok[None, :], other=0.0)
        acc += tl.dot(xs.to(DOT), ws.to(DOT), input_precision=PRECISION)
    tl.store(t + pos[:, None] * stride_tm + rw[None, :], acc, mask=m_ok[:, None] & w_ok[None, :])


@triton.jit
def _expand_kernel(t, b, scale, rows, starts, y, N, W, stride_tm, stride_bs, stride_bk, stride_ym,
                   DOT: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    slot = tl.program_id(2)
    end = tl.load(starts + slot + 1)
    first = tl.load(starts + slot) + tl.program_id(0) * BLOCK_M
    if first >= end:
        return
    pos = first + tl.arange(0, BLOCK_M)
    m_ok = pos < end
    r = tl.load(rows + pos, mask=m_ok, other=0).to(tl.int64)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rw = tl.arange(0, BLOCK_W)
    b_slot = b + slot.to(tl.int64) * stride_bs
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for w0 in range(0, W, BLOCK_W):
        w = w0 + rw
        w_ok = w < W
        ts = tl.load(t + pos[:, None] * stride_tm + w[None, :], mask=m_ok[:, None] & w_ok[None, :], other=0.0)
        bs = tl.load(b_slot + w[:, None] * stride_bk + rn[None, :], mask=w_ok[:, None] & n_ok[None, :], other=0.0)
        acc += tl.dot(ts.to(DOT), bs.to(DOT), input_precision=PRECISION)
    ptrs = y + r[:, None] * stride_ym + rn[None, :]
    mask = m_ok[:, None] & n_ok[None, :]
    d = acc * tl.load(scale + slot)
    tl.store(ptrs, (tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) + d).to(y.dtype.element_ty), mask=mask)


def by_slot(runs: list[tuple[int, int, int]], rows: list[int], dest: list[int], per_slot: int
            ) -> tuple[list[int], list[int]]:
    """A `lora.batch.Plan`'s adapter rows (its sliced runs and its padded rows alike, row j of slot s at s * M + j)
    grouped by slot, and each slot's start: slot s's rows are out[starts[s]:starts[s + 1]] (pure)."""
    groups: dict[int, list[int]] = {}
    for slot, start, end in runs:
        groups.setdefault(slot, []).extend(range(start, end))
    for r, d in zip(rows, dest, strict=True):
        groups.setdefault(d // per_slot, []).append(r)
    out, starts = [], [0]
    for s in range(max(groups) + 1):
        out += groups.get(s, [])
        starts.append(len(out))
    return out, starts


@dataclass
class Segments:
    """One step's adapter rows as the kernels take them, shared by every wrapped linear."""

    rows: torch.Tensor  # [n] int32 rows of x, grouped by slot
    starts: torch.Tensor  # [S + 1] int32
    num_slots: int
    most_rows: int  # the most rows one slot has

    @classmethod
    def of(cls, plan, device) -> "Segments":
        rows, starts = by_slot(plan.runs, plan.rows, plan.dest, plan.per_slot)
        idx = torch.tensor(rows + starts, dtype=torch.int32).to(device)
        most = max(b - a for a, b in zip(starts[:-1], starts[1:], strict=True))
        return cls(idx[:len(rows)], idx[len(rows):], len(starts) - 1, most)

    def add(self, y: torch.Tensor, x: torch.Tensor, lin) -> torch.Tensor:
        """y [T, out] += each adapter row's delta, in place; x [T, in]; lin: the LoRALinear, its stacks a [S, in, W],
        b [S, W, out] and scale [S, 1, 1] float32 (B multiplied whole). Returns y."""
        a, b, scale = lin.lora_a, lin.lora_b, lin.scale
        x = x.contiguous()  # the kernels step along a row by 1 (a no-op for the decoder's activations)
        n, (k, w), out = self.rows.shape[0], a.shape[1:], b.shape[2]
        t = torch.empty(n, w, device=x.device, dtype=torch.float32)
        block_m = 16 if self.most_rows <= 16 else 64
        block_w = min(MAX_BLOCK_W, max(16, triton.next_power_of_2(w)))
        # the interpreter (CPU tensors) has no bf16 matmul: it multiplies in fp32
        dot = _TL_DTYPES[x.dtype] if x.is_cuda else tl.float32
        precision = "ieee" if dot == tl.float32 else "tf32"  # fp32 models multiply in fp32, not TF32
        m_tiles = triton.cdiv(self.most_rows, block_m)
        _shrink_kernel[(m_tiles, triton.cdiv(w, block_w), self.num_slots)](
            x, a, self.rows, self.starts, t, k, w, x.stride(0), a.stride(0), a.stride(1), t.stride(0), DOT=dot,
            PRECISION=precision, BLOCK_M=block_m, BLOCK_W=block_w, BLOCK_K=BLOCK_K)
        _expand_kernel[(m_tiles, triton.cdiv(out, BLOCK_N), self.num_slots)](
            t, b, scale, self.rows, self.starts, y, out, w, t.stride(0), b.stride(0), b.stride(1), y.stride(0),
            DOT=dot, PRECISION=precision, BLOCK_M=block_m, BLOCK_W=block_w, BLOCK_N=BLOCK_N)
        return y
