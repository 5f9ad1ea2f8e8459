"""Our paged attention: `attend`, called by our decoder (engine/models/llama.py) and, through transformers'
attention interface, by transformers' modules.

The model computes q/k/v and applies RoPE from our per-token position ids; `attend` writes the
step's new K/V into the paged cache by slot and attends over each sequence's blocks. The step is one packed
batch of shape [1, T]: single-token sequences (decodes) first, sorted by context length, then prefill chunks.
Decodes of similar length form a group that shares one SDPA call over K/V gathered whole blocks at a time by
block table (padded to the group's longest context, masked), with the query heads of a KV group folded into
the query length so GQA needs no K/V repeat. Each prefill chunk is its own call; after a cached prefix a short one
(a speculative verify's drafts) folds its heads the same way (FOLD_ROWS), and a long one attends to the prefix and
to itself in two passes merged by their log-sum-exps (SPLIT_MIN).
On CPU with our kernel (CPU_KERNEL), decodes and chunks of up to KERNEL_ROWS tokens attend through it instead, K/V
read in place by block table, one call a layer (CpuRows) that writes the step's new K/V too. On CUDA the step carries
KernelInputs instead, and two Triton kernels (engine/kernels/) read K/V in place by block table: one call for all
decodes, one for all prefill chunks.
"""

import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from floodway.engine.kernels import cpu, cpu_attention

ATTN_NAME = "floodway_paged"
# CUDA steps use the Triton kernels where triton is installed (it comes with PyPI's CUDA torch), else the SDPA path.
KERNELS_AVAILABLE = importlib.util.find_spec("triton") is not None
# torch's CPU flash attention takes query rows in blocks of 32 per head: a chunk whose query heads of a KV group fit
# one block together attends as one block per KV head, not one nearly empty block per query head (SmolLM2's 9 heads
# over 3, a layer call with 2-9 new tokens: 1.07-1.44x faster in bf16; in float32 1.05-1.20x after 400 or more
# cached tokens, 0.92-0.98x after 128; docs/benchmarks/2026-12-06-vllm-one-core.md).
FOLD_ROWS = 32
# A chunk after a cached prefix under one mask over its whole context: torch's CPU flash kernel computes every
# query-key pair, the causally hidden half of the chunk's own block included. From this length on the chunk attends
# to the prefix unmasked and to itself causally instead (_split): 1.03-1.22x faster at 768 tokens, 1.32-1.57x at
# 2,048; at 256-512 tokens 0.81-1.09x, so shorter chunks keep the one masked call (the same page).
SPLIT_MIN = 768
_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # returns the log-sum-exp too
# On CPU, sequences of up to KERNEL_ROWS new tokens in the cache's dtype (decodes, a verify's drafts) attend through
# our kernel (kernels/cpu_attention.c) where it is built and the CPU has AVX-512 BF16: K/V read in place, one call a
# layer. It reads a head's keys once a query row, so longer chunks, and float32 chunks (twice the bytes), go to SDPA,
# whose flash kernel multiplies whole blocks: our kernel was 1.06-2.2x SDPA on bf16 chunks of 5-32 tokens, 0.58-0.90x
# on float32 ones after 600-1200 cached tokens (docs/benchmarks/2026-12-07-cpu-attention.md).
KERNEL_ROWS = {torch.bfloat16: 32, torch.float32: 1}
CPU_KERNEL = cpu.available()


@dataclass
class DecodeGroup:
    start: int  # offset of its first token in the packed batch
    count: int
    blocks: torch.Tensor  # [count * width] block ids, each row padded to the group's widest table
    mask: torch.Tensor  # [count, 1, 1, width * block_size] bool: real context positions


@dataclass
class PrefillChunk:
    start: int
    length: int
    blocks: torch.Tensor | None  # the context's block ids; None when there is no cached prefix
    ctx_len: int
    mask: torch.Tensor | None  # [length, ctx_len] bool, None when plain causal


@dataclass
class KernelInputs:
    """What the Triton kernels read; int32 tensors on the step's device."""
    num_decode: int  # the packed batch's first num_decode tokens are decodes, the rest prefill chunks
    decode_tables: torch.Tensor  # [num_decode, width] block ids, rows padded with block 0
    decode_lens: torch.Tensor  # [num_decode] context lengths, this step's token included
    prefill_tables: torch.Tensor  # [chunks, width]
    query_start: torch.Tensor  # [chunks + 1] offsets of the chunks within the prefill part of the batch
    prefill_lens: torch.Tensor  # [chunks] context lengths: cached prefix plus the chunk


@dataclass
class CpuRows:
    """The sequences our CPU kernel attends for (int32): each one's (first row, rows, context length) and blocks."""
    seqs: torch.Tensor  # [S, 3]
    tables: torch.Tensor  # [S, width] block ids, rows padded with block 0
    max_ctx: int
    decodes_only: bool  # one row each
    args: tuple | None = None  # the kernel's arguments common to a step's layers (cpu_attention.attend makes them)


@dataclass
class StepMeta:
    k_caches: list[torch.Tensor]  # per layer [num_blocks, block_size, kv_heads, head_dim]
    v_caches: list[torch.Tensor]
    slot_mapping: torch.Tensor  # [T] flat cache slot (block * block_size + offset) of each new token
    decodes: list[DecodeGroup]
    prefills: list[PrefillChunk]
    kernel: KernelInputs | None = None  # set (on CUDA) instead of decodes and prefills
    cpu: CpuRows | None = None  # the sequences of few rows on CPU (CPU_KERNEL), beside the SDPA ones

    def decodes_only(self) -> bool:
        """A CPU step of single-token sequences only (what a compiled decode graph runs)."""
        return self.kernel is None and not self.prefills and (self.cpu is None or self.cpu.decodes_only)


def _gather(cache: torch.Tensor, blocks: torch.Tensor, rows: int) -> torch.Tensor:
    """[rows, kv_heads, width * block_size, head_dim] copy of the given blocks, each head's rows contiguous."""
    g = cache.permute(2, 0, 1, 3).index_select(1, blocks)  # [kv_heads, rows * width, block_size, head_dim]
    return g.view(g.shape[0], rows, -1, g.shape[-1]).transpose(0, 1)


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, floodway_meta=None,
                    **kwargs):
    """transformers' attention interface over `attend`: query [1, H, T, hd], key and value [1, KVH, T, hd]."""
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
    return attend(floodway_meta, module.layer_idx, q, k, v, scaling).unsqueeze(0), None


def attend(meta: StepMeta, layer: int, q, k, v, scaling) -> torch.Tensor:
    """Writes the step's new k, v [T, KVH, hd] into layer's paged cache by slot, then attends q [T, H, hd] over each
    sequence's blocks; returns [T, H, hd]. What both the transformers path and our decoder call."""
    k_cache, v_cache = meta.k_caches[layer], meta.v_caches[layer]
    if meta.cpu is None:  # else our CPU kernel writes them, in the same call as its attention
        k_cache.view(-1, *k.shape[1:]).index_copy_(0, meta.slot_mapping, k)
        v_cache.view(-1, *v.shape[1:]).index_copy_(0, meta.slot_mapping, v)
    if meta.kernel is not None:
        return _kernel_attention(meta.kernel, q, k_cache, v_cache, scaling)
    num_heads, num_kv, head_dim = q.shape[1], k.shape[1], q.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous: callers view it as [T, H * hd]
    if meta.cpu is not None:  # every new K/V of the step written first, so the SDPA rows below read them too
        cpu_attention.attend(q, k, v, meta.slot_mapping, k_cache, v_cache, out, meta.cpu,
                             head_dim ** -0.5 if scaling is None else scaling)
    for g in meta.decodes:
        qd = q[g.start:g.start + g.count].reshape(g.count, num_kv, num_heads // num_kv, head_dim)
        kd, vd = _gather(k_cache, g.blocks, g.count), _gather(v_cache, g.blocks, g.count)
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=g.mask, scale=scaling)
        out[g.start:g.start + g.count] = od.reshape(g.count, num_heads, head_dim)
    group = num_heads // num_kv
    for p in meta.prefills:
        qp = q[p.start:p.start + p.length]
        if p.blocks is None:
            kp = k[p.start:p.start + p.length].transpose(0, 1).unsqueeze(0)
            vp = v[p.start:p.start + p.length].transpose(0, 1).unsqueeze(0)
        else:
            kp = _gather(k_cache, p.blocks, 1)[:, :, :p.ctx_len]
            vp = _gather(v_cache, p.blocks, 1)[:, :, :p.ctx_len]
        if p.mask is not None and p.length * group <= FOLD_ROWS:
            out[p.start:p.start + p.length] = _folded(qp, kp, vp, p.mask, scaling)
            continue
        if p.mask is not None and p.length >= SPLIT_MIN and q.device.type == "cpu":
            out[p.start:p.start + p.length] = _split(qp, kp, vp, p.ctx_len - p.length, scaling)
            continue
        op = F.scaled_dot_product_attention(qp.transpose(0, 1).unsqueeze(0), kp, vp, attn_mask=p.mask,
                                            is_causal=p.mask is None, scale=scaling, enable_gqa=group > 1)
        out[p.start:p.start + p.length] = op[0].transpose(0, 1)
    return out


def _folded(q, k, v, mask, scaling):
    """q [L, H, hd] over k, v [1, KVH, ctx, hd] under mask [L, ctx], each KV group's query heads folded into the
    query length ([1, KVH, group * L, hd], the mask repeated per head): [L, H, hd]."""
    length, num_heads, head_dim = q.shape
    num_kv = k.shape[1]
    group = num_heads // num_kv
    qf = q.view(length, num_kv, group, head_dim).permute(1, 2, 0, 3).reshape(1, num_kv, group * length, head_dim)
    o = F.scaled_dot_product_attention(qf, k, v, attn_mask=mask.repeat(group, 1), scale=scaling)
    return o.view(num_kv, group, length, head_dim).permute(2, 0, 1, 3).reshape(length, num_heads, head_dim)


def _split(q, k, v, prefix: int, scaling):
    """q [L, H, hd], the last L of k, v [1, KVH, ctx, hd], attending causally: over the `prefix` positions before
    it with no mask (query heads folded, as _folded) and over its own causally (K/V repeated per query head), the two
    merged by their log-sum-exps: [L, H, hd]."""
    length, num_heads, head_dim = q.shape
    num_kv = k.shape[1]
    group = num_heads // num_kv
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, H, L, hd]
    o1, lse1 = _FLASH_CPU(qh.reshape(1, num_kv, group * length, head_dim), k[:, :, :prefix], v[:, :, :prefix],
                          scale=scaling)
    k_own, v_own = (t[:, :, prefix:].repeat_interleave(group, 1) for t in (k, v))
    o2, lse2 = _FLASH_CPU(qh, k_own, v_own, is_causal=True, scale=scaling)
    lse1 = lse1.reshape(1, num_heads, length)
    top = torch.maximum(lse1, lse2)
    w1, w2 = (lse1 - top).exp_(), (lse2 - top).exp_()
    total = w1 + w2
    o = o1.reshape(1, num_heads, length, head_dim) * (w1 / total).unsqueeze(-1) + o2 * (w2 / total).unsqueeze(-1)
    return o[0].transpose(0, 1).to(q.dtype)


def _kernels():
    """The Triton kernels, imported on the first CUDA step: a CPU engine never needs triton."""
    from floodway.engine.kernels import paged_attention

    return paged_attention


def _kernel_attention(kin: KernelInputs, q, k_cache, v_cache, scaling):
    kernels, out, nd = _kernels(), torch.empty(q.shape, dtype=q.dtype, device=q.device), kin.num_decode
    if nd:
        kernels.paged_decode(q[:nd], k_cache, v_cache, kin.decode_tables, kin.decode_lens, scaling, out=out[:nd])
    if nd < q.shape[0]:
        kernels.paged_prefill(q[nd:], k_cache, v_cache, kin.prefill_tables, kin.query_start, kin.prefill_lens,
                              scaling, out=out[nd:])
    return out


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, paged_attention)
