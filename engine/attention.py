"""Our paged attention, plugged into transformers' attention interface.

The HF module code computes q/k/v and applies RoPE from our per-token position ids; this function writes the
step's new K/V into the paged cache by slot and attends over each sequence's blocks. The step is one packed
batch of shape [1, T]: single-token sequences (decodes) first, then prefill chunks. All decodes share one SDPA
call over K/V gathered by block table (padded to the longest context, masked), with the query heads of a KV
group folded into the query length so GQA needs no K/V repeat. Each prefill chunk is its own call.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

ATTN_NAME = "floodway_paged"


@dataclass
class PrefillChunk:
    start: int  # offset of its first token in the packed batch
    length: int
    ctx_slots: torch.Tensor | None  # cache slots of the whole context; None when there is no cached prefix
    mask: torch.Tensor | None  # [length, ctx] bool, None when plain causal


@dataclass
class StepMeta:
    k_caches: list[torch.Tensor]  # per layer [num_slots, kv_heads, head_dim]
    v_caches: list[torch.Tensor]
    slot_mapping: torch.Tensor  # [T] cache slot of each new token
    num_decode: int
    decode_slots: torch.Tensor | None  # [D, Lmax] cache slots of each decode's context (padded)
    decode_mask: torch.Tensor | None  # [D, 1, 1, Lmax] bool
    prefills: list[PrefillChunk]


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, floodway_meta=None,
                    **kwargs):
    meta: StepMeta = floodway_meta
    layer = module.layer_idx
    k_cache, v_cache = meta.k_caches[layer], meta.v_caches[layer]
    q = query[0].transpose(0, 1)  # [T, H, hd]
    k = key[0].transpose(0, 1)  # [T, KVH, hd]
    v = value[0].transpose(0, 1)
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    num_heads, num_kv, head_dim = q.shape[1], k.shape[1], q.shape[2]
    out = torch.empty_like(q)
    d = meta.num_decode
    if d:
        qd = q[:d].reshape(d, num_kv, num_heads // num_kv, head_dim)
        kd = k_cache[meta.decode_slots].transpose(1, 2)  # [D, KVH, L, hd]
        vd = v_cache[meta.decode_slots].transpose(1, 2)
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask, scale=scaling)
        out[:d] = od.reshape(d, num_heads, head_dim)
    for p in meta.prefills:
        qp = q[p.start:p.start + p.length].transpose(0, 1).unsqueeze(0)
        if p.ctx_slots is None:
            kp, vp = k[p.start:p.start + p.length], v[p.start:p.start + p.length]
        else:
            kp, vp = k_cache[p.ctx_slots], v_cache[p.ctx_slots]
        kp, vp = kp.transpose(0, 1).unsqueeze(0), vp.transpose(0, 1).unsqueeze(0)
        op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None, scale=scaling,
                                            enable_gqa=num_heads != num_kv)
        out[p.start:p.start + p.length] = op[0].transpose(0, 1)
    return out.unsqueeze(0), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, paged_attention)
