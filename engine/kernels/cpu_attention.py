"""Our CPU paged attention for few query rows a sequence (cpu_attention.c): decodes and a speculative verify's drafts
read K/V in place by block table, in one call a layer; attention.py sends longer chunks to torch's SDPA."""

import torch
from floodway.engine.kernels import cpu

MAX_DIM = 256  # head sizes the kernel takes: it keeps a row's query and output in registers (cpu_attention.c)


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, seqs: torch.Tensor,
           tables: torch.Tensor, max_ctx: int, scale: float) -> None:
    """out [T, H, hd] (contiguous, q's dtype) = attention of q [T, H, hd] over the caches [blocks, block_size, KVH,
    hd] (any strides, hd contiguous; kv_cache.allocate's are head-major views); seqs [S, 3] int32: each sequence's
    (first row, rows, context length), its rows its last tokens; tables [S, width] int32 block ids; max_ctx: the
    longest context."""
    q = q.contiguous()
    _, block_size, kv_heads, dim = k_cache.shape
    assert out.is_contiguous() and q.dtype == out.dtype == k_cache.dtype in (torch.bfloat16, torch.float32)
    assert k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride() and dim <= MAX_DIM
    cpu.lib.paged_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), seqs.data_ptr(),
                            tables.data_ptr(), seqs.shape[0], tables.shape[1], q.shape[1], kv_heads, dim, block_size,
                            *k_cache.stride()[:3], scale, int(q.dtype == torch.bfloat16), torch.get_num_threads(),
                            max_ctx)
