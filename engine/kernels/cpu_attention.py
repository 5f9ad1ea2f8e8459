"""Our CPU paged attention for few query rows a sequence (cpu_attention.c): decodes and a speculative verify's drafts
read K/V in place by block table, in one call a layer; attention.py sends longer chunks to torch's SDPA."""

import torch
from floodway.engine.kernels import cpu

MAX_DIM = 256  # head sizes the kernel takes: it keeps a row's query and output in registers (cpu_attention.c)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, k_cache: torch.Tensor,
           v_cache: torch.Tensor, out: torch.Tensor, rows, scale: float) -> None:
    """Writes the step's new keys and values k, v [T, KVH, hd] (any strides, hd contiguous) into the caches [blocks,
    block_size, KVH, hd] (any strides, hd contiguous; kv_cache.allocate's are head-major views) at their flat slots
    [T] (int64), then out [T, H, hd] (contiguous, q's dtype) = attention of q [T, H, hd] for the
    sequences of `rows` (attention.CpuRows: each one's first row, rows and context length, its block table, the
    longest context). The call's arguments that are the same for every layer of a step are made at its first call
    and kept on `rows`."""
    if rows.args is None:
        _, block_size, kv_heads, dim = k_cache.shape
        assert out.is_contiguous() and q.dtype == out.dtype == k.dtype == k_cache.dtype in (torch.bfloat16,
                                                                                            torch.float32)
        assert k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride() and dim <= MAX_DIM
        assert slots.dtype == torch.int64 and slots.is_contiguous() and k.stride(2) == v.stride(2) == 1
        rows.args = (rows.seqs.data_ptr(), rows.tables.data_ptr(), rows.seqs.shape[0], rows.tables.shape[1],
                     q.shape[1], kv_heads, dim, block_size, *k_cache.stride()[:3], scale,
                     int(q.dtype == torch.bfloat16), torch.get_num_threads(), rows.max_ctx)
    q = q.contiguous()
    cpu.lib.paged_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), k.data_ptr(),
                            v.data_ptr(), slots.data_ptr(), k.shape[0], *k.stride()[:2], *v.stride()[:2], *rows.args)
