"""Sizing and allocating the paged KV cache: per-layer K and V tensors of fixed-size blocks (GQA-aware)."""

from dataclasses import dataclass

import torch
from floodway.engine.config import DEFAULT_CPU_KV_BYTES, EngineConfig


@dataclass
class KVShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: torch.dtype

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes across all layers, K and V."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_dim * elem


def num_blocks_for(cfg: EngineConfig, shape: KVShape, max_model_len: int, device: torch.device) -> int:
    """How many blocks the budget allows: an explicit count, else the CPU byte budget, else the GPU share."""
    if cfg.num_kv_blocks is not None:
        return cfg.num_kv_blocks
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        # Keep headroom for activations of a full token budget (logits, MLP intermediates): a rough fixed share.
        reserve = max(2**30, int(0.05 * total))
        budget = int(total * cfg.gpu_memory_utilization) - (total - free) - reserve
    else:
        need = cfg.max_num_seqs * -(-max_model_len // shape.block_size) * shape.block_bytes
        budget = cfg.kv_cache_bytes if cfg.kv_cache_bytes is not None else min(DEFAULT_CPU_KV_BYTES, need)
    blocks = budget // shape.block_bytes
    if blocks < 1:
        raise ValueError(f"KV budget of {budget} bytes holds no {shape.block_bytes}-byte block: raise kv_cache_bytes "
                         "or gpu_memory_utilization")
    return blocks


def allocate(shape: KVShape, num_blocks: int, device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-layer K and V caches of shape [num_blocks, block_size, kv_heads, head_dim], stored head-major: each is a
    view of a [kv_heads, num_blocks, block_size, head_dim] tensor, so a head's context gathered block by block is
    one contiguous [positions, head_dim] matrix, which SDPA reads at unit stride (faster on CPU: measured in
    docs/benchmarks/engine-code-notes.md)."""
    size = (shape.num_kv_heads, num_blocks, shape.block_size, shape.head_dim)

    def cache():
        return torch.zeros(size, dtype=shape.dtype, device=device).permute(1, 2, 0, 3)

    return [cache() for _ in range(shape.num_layers)], [cache() for _ in range(shape.num_layers)]
