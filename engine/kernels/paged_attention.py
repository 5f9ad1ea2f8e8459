"""Paged attention in Triton that reads K/V in place from the block pool by block table (no gather copy).

Both kernels share one inner loop (`_attend`): an online softmax over a range of context positions for a tile of
query rows, where a row is one (token, query head) pair of a single KV head's group, so GQA reads each K/V tile
once for all the query heads that share it. Each position's block is looked up in the block table, so any block
size works and a tile may span blocks. Scores run in log2 units (exp2). fp32 accumulation; q and the caches in
fp32, bf16 or fp16 (fp32 dots in IEEE precision, not TF32, so fp32 matches SDPA closely). Off CUDA (Triton's
interpreter) bf16 dots run in fp32: the interpreter's dot multiplies bf16 bit patterns as integers.

Layouts: q [tokens, heads, head_dim] (any strides), caches [num_blocks, block_size, kv_heads, head_dim] with the
last dim contiguous, block tables [rows, width] int32, context lengths int32. Grids depend only on tensor
shapes, never on tensor values, so a decode step is capturable in a CUDA graph.
"""

import functools

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
MIN_SPLIT_POSITIONS = 256  # a decode split-K partition covers at least this many context positions
MAX_SPLITS = 16  # a power of two: the combine kernel loads all splits as one tile
FP_FUSION = True  # fused multiply-adds, Triton's default so far; explicit, as Triton 3.9 warns it will change


@triton.jit
def _attend(q, acc, m_i, l_i, limit, lo, hi, table_row, k_cache, v_cache, kv_head,
            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, qk_scale,
            BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
            DOT: tl.constexpr, PRECISION: tl.constexpr):
    """Folds context positions [lo, hi) into (acc, m_i, l_i); row r sees only positions < limit[r]. q is in DOT."""
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD_DIM
    for start in range(lo, hi, TILE_N):
        pos = start + tl.arange(0, TILE_N)
        in_range = pos < hi
        blk = tl.load(table_row + pos // BLOCK_SIZE, mask=in_range, other=0).to(tl.int64)
        slot = pos % BLOCK_SIZE
        kv_ok = in_range[:, None] & d_ok[None, :]
        k = tl.load(k_cache + blk[:, None] * stride_kb + slot[:, None] * stride_ks + kv_head * stride_kh
                    + offs_d[None, :], mask=kv_ok, other=0.0)
        s = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PRECISION) * qk_scale
        s = tl.where((pos[None, :] < limit[:, None]) & in_range[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that sees nothing yet stays at zero
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        v = tl.load(v_cache + blk[:, None] * stride_vb + slot[:, None] * stride_vs + kv_head * stride_vh
                    + offs_d[None, :], mask=kv_ok, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit(do_not_specialize=["split_len", "stride_bt"])  # no recompiles as tables widen
def _decode_kernel(out, part_out, part_lse, q, k_cache, v_cache, block_tables, context_lens, qk_scale, split_len,
                   stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
                   stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                   GROUP: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                   DOT: tl.constexpr, PRECISION: tl.constexpr):
    """One program per (sequence, KV head, split): the group's query heads are the rows. With SPLIT each program
    writes its split's normalised partial output and log-sum-exp for _combine_kernel."""
    seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    ctx = tl.load(context_lens + seq)
    rows = tl.arange(0, BLOCK_M)
    heads = kv_head * GROUP + rows
    offs_d = tl.arange(0, D_PAD)
    mask = (rows < GROUP)[:, None] & (offs_d < HEAD_DIM)[None, :]
    qt = tl.load(q + seq * stride_qt + heads[:, None] * stride_qh + offs_d[None, :], mask=mask, other=0.0).to(DOT)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, ctx)
    acc, m_i, l_i = _attend(qt, tl.zeros([BLOCK_M, D_PAD], tl.float32), tl.full([BLOCK_M], float("-inf"), tl.float32),
                            tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.int32) + ctx, lo, hi,
                            block_tables + seq.to(tl.int64) * stride_bt, k_cache, v_cache, kv_head,
                            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, qk_scale,
                            BLOCK_SIZE, TILE_N, HEAD_DIM, D_PAD, DOT, PRECISION)
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # no visible position (context 0): zeros
    if not SPLIT:
        tl.store(out + seq * stride_ot + heads[:, None] * stride_oh + offs_d[None, :], o.to(out.dtype.element_ty),
                 mask=mask)
    else:
        row = (seq * tl.num_programs(1) * GROUP + heads) * tl.num_programs(2) + split  # part_*: [B, H, splits, ...]
        tl.store(part_out + row[:, None] * D_PAD + offs_d[None, :], o, mask=mask)
        lse = tl.where(l_i > 0, m_i + tl.math.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
        tl.store(part_lse + row, lse, mask=rows < GROUP)


@triton.jit
def _combine_kernel(out, part_out, part_lse, num_splits, stride_ot, stride_oh,
                    S_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr):
    """One program per (sequence, query head): merges the splits' partial softmaxes by their log-sum-exp."""
    seq, head = tl.program_id(0), tl.program_id(1)
    row = (seq * tl.num_programs(1) + head) * num_splits
    offs_s = tl.arange(0, S_PAD)
    offs_d = tl.arange(0, D_PAD)
    lse = tl.load(part_lse + row + offs_s, mask=offs_s < num_splits, other=float("-inf"))
    top = tl.max(lse, 0)
    w = tl.math.exp2(lse - tl.where(top == float("-inf"), 0.0, top))
    o = tl.load(part_out + (row + offs_s[:, None]) * D_PAD + offs_d[None, :], mask=(offs_s < num_splits)[:, None],
                other=0.0)
    total = tl.sum(w, 0)
    res = tl.sum(w[:, None] * o, 0) / tl.where(total > 0, total, 1.0)
    tl.store(out + seq * stride_ot + head * stride_oh + offs_d, res.to(out.dtype.element_ty), mask=offs_d < HEAD_DIM)


@triton.jit
def _sequence_of(query_start, block_idx, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence whose query blocks hold global block block_idx; sequence s's blocks start at
    query_start[s] // BLOCK_Q + s (binary search)."""
    lo: tl.int32 = 0
    hi: tl.int32 = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(query_start + mid) // BLOCK_Q + mid <= block_idx:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit(do_not_specialize=["num_seqs", "stride_bt"])
def _prefill_kernel(out, q, k_cache, v_cache, block_tables, query_start, context_lens, qk_scale, num_seqs,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
                    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                    DOT: tl.constexpr, PRECISION: tl.constexpr):
    """One program per (BLOCK_Q query tokens of one chunk, KV head): rows are (token, query head of the group)."""
    block_idx, kv_head = tl.program_id(0), tl.program_id(1)
    seq = _sequence_of(query_start, block_idx, num_seqs, BLOCK_Q)
    q0 = tl.load(query_start + seq)
    n = tl.load(query_start + seq + 1) - q0
    first = (block_idx - (q0 // BLOCK_Q + seq)) * BLOCK_Q  # this program's first token within its chunk
    if first < n:
        ctx = tl.load(context_lens + seq)
        rows = tl.arange(0, BLOCK_M)
        tok = first + rows // GROUP
        heads = kv_head * GROUP + rows % GROUP
        row_ok = (rows < BLOCK_Q * GROUP) & (tok < n)
        offs_d = tl.arange(0, D_PAD)
        mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
        qt = tl.load(q + (q0 + tok)[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :], mask=mask,
                     other=0.0).to(DOT)
        limit = tl.where(row_ok, ctx - n + tok + 1, 0)  # causal: token i of the chunk sees ctx - n + i + 1
        hi = tl.minimum(ctx, ctx - n + first + BLOCK_Q)
        acc, m_i, l_i = _attend(qt, tl.zeros([BLOCK_M, D_PAD], tl.float32),
                                tl.full([BLOCK_M], float("-inf"), tl.float32), tl.zeros([BLOCK_M], tl.float32), limit,
                                0, hi, block_tables + seq.to(tl.int64) * stride_bt, k_cache, v_cache, kv_head,
                                stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, qk_scale,
                                BLOCK_SIZE, TILE_N, HEAD_DIM, D_PAD, DOT, PRECISION)
        o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out + (q0 + tok)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                 o.to(out.dtype.element_ty), mask=mask)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_splits(batch: int, kv_heads: int, max_positions: int, device: torch.device) -> int:
    """Decode split-K partitions: enough programs to fill the GPU when batch x KV heads alone cannot; a function
    of shapes only, so a captured graph keeps it. 1 off CUDA (the interpreter)."""
    if device.type != "cuda":
        return 1
    sms, programs = _sm_count(device.index or 0), batch * kv_heads
    if programs >= sms:
        return 1
    return max(1, min(triton.cdiv(max_positions, MIN_SPLIT_POSITIONS), triton.cdiv(2 * sms, programs), MAX_SPLITS))


def _common(q, k_cache, scale):
    heads, head_dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[2]
    assert heads % kv_heads == 0 and k_cache.shape[3] == head_dim and q.stride(2) == 1
    scale = head_dim ** -0.5 if scale is None else scale
    dot = tl.float32 if q.dtype == torch.bfloat16 and not q.is_cuda else _TL_DTYPES[q.dtype]
    return (heads // kv_heads, kv_heads, max(16, triton.next_power_of_2(head_dim)), scale * LOG2E, dot,
            "ieee" if dot == tl.float32 else "tf32")


def _cache_strides(k_cache, v_cache):
    assert k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    return (*k_cache.stride()[:3], *v_cache.stride()[:3])


def paged_decode(q, k_cache, v_cache, block_tables, context_lens, scale=None, *, out=None, splits=None,
                 tile_n=64):
    """One query token per sequence: q [B, H, D] -> [B, H, D]. Row b attends over its first context_lens[b]
    positions, found through block_tables[b]; rows with context length 0 (padding) give zeros and read no
    block. `splits` overrides the split-K choice (`num_splits`)."""
    batch, heads, head_dim = q.shape
    group, kv_heads, d_pad, qk_scale, dot, precision = _common(q, k_cache, scale)
    out = torch.empty_like(q) if out is None else out
    block_size = k_cache.shape[1]
    if splits is None:
        splits = num_splits(batch, kv_heads, block_tables.shape[1] * block_size, q.device)
    assert 1 <= splits <= MAX_SPLITS
    split_len = triton.cdiv(triton.cdiv(block_tables.shape[1] * block_size, splits), tile_n) * tile_n
    if splits > 1:
        part_out = torch.empty(batch, heads, splits, d_pad, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(batch, heads, splits, dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out  # unused
    _decode_kernel[(batch, kv_heads, splits)](
        out, part_out, part_lse, q, k_cache, v_cache, block_tables, context_lens, qk_scale, split_len,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        *_cache_strides(k_cache, v_cache),
        GROUP=group, BLOCK_M=max(16, triton.next_power_of_2(group)), SPLIT=splits > 1, BLOCK_SIZE=block_size,
        TILE_N=tile_n, HEAD_DIM=head_dim, D_PAD=d_pad, DOT=dot, PRECISION=precision,
        enable_fp_fusion=FP_FUSION)
    if splits > 1:
        _combine_kernel[(batch, heads)](out, part_out, part_lse, splits, out.stride(0), out.stride(1),
                                        S_PAD=MAX_SPLITS, HEAD_DIM=head_dim, D_PAD=d_pad, enable_fp_fusion=FP_FUSION)
    return out


def paged_prefill(q, k_cache, v_cache, block_tables, query_start, context_lens, scale=None, *, out=None,
                  block_m=None, tile_n=64):
    """Prefill chunks whose K/V (cached prefix and the chunk's own tokens) are already in the cache: q [T, H, D]
    -> [T, H, D]. Chunk s is q[query_start[s]:query_start[s + 1]], its context is context_lens[s] positions
    through block_tables[s], and its token i (of n) sees positions < context_lens[s] - n + i + 1. `block_m` query
    rows per program (default 64; 32 past head_dim 128, where 64 rows spill registers on sm_90)."""
    tokens, heads, head_dim = q.shape
    group, kv_heads, d_pad, qk_scale, dot, precision = _common(q, k_cache, scale)
    out = torch.empty_like(q) if out is None else out
    num_seqs = context_lens.shape[0]
    block_m = max(block_m or (64 if d_pad <= 128 else 32), triton.next_power_of_2(group))
    block_q = block_m // group
    _prefill_kernel[(tokens // block_q + num_seqs, kv_heads)](
        out, q, k_cache, v_cache, block_tables, query_start, context_lens, qk_scale, num_seqs,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        *_cache_strides(k_cache, v_cache),
        GROUP=group, BLOCK_M=block_m, BLOCK_Q=block_q, BLOCK_SIZE=k_cache.shape[1], TILE_N=tile_n,
        HEAD_DIM=head_dim, D_PAD=d_pad, DOT=dot, PRECISION=precision,
        enable_fp_fusion=FP_FUSION)
    return out
