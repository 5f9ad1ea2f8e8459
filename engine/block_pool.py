"""Fixed-size KV blocks: ref counts, a free queue in LRU order and the prefix-cache map.

A full block is cached under a chained hash (parent block's hash, its token ids, extra keys such as the LoRA
adapter). A lookup verifies the stored parent hash, token ids and extra keys, so a hash collision can never serve
wrong KV.
Freed blocks keep their cached contents until they are reallocated (least recently freed first).
"""

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    parent_hash: int | None = None
    token_ids: tuple[int, ...] = ()
    extra: tuple = ()


def chain_hash(parent_hash: int | None, token_ids: tuple[int, ...], extra: tuple = ()) -> int:
    return hash((parent_hash, token_ids, extra))


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {num_blocks}")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.enable_caching = enable_caching

    @property
    def num_total(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def allocate(self, n: int) -> list[int]:
        """Takes n blocks from the front of the free queue (least recently freed), evicting their cache entries."""
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks, {len(self.free_queue)} free")
        out = []
        for _ in range(n):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None:
                if self.cached.get(block.block_hash) == block_id:
                    del self.cached[block.block_hash]
                block.block_hash, block.parent_hash, block.token_ids, block.extra = None, None, (), ()
            block.ref_cnt = 1
            out.append(block_id)
        return out

    def touch(self, block_ids: list[int]) -> None:
        """Takes a reference on cache-hit blocks, pulling free ones out of the free queue."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt == 0:
                del self.free_queue[block_id]
            block.ref_cnt += 1

    def free(self, block_ids: list[int]) -> None:
        """Drops one reference per block; blocks reaching zero join the tail of the free queue in the given order."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt <= 0:
                raise RuntimeError(f"block {block_id} freed with ref count {block.ref_cnt}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue[block_id] = None

    def lookup(self, parent_hash: int | None, token_ids: tuple[int, ...], extra: tuple = ()) -> tuple[int, int] | None:
        """(block id, hash) of a cached block holding exactly these tokens after this parent, or None."""
        if not self.enable_caching:
            return None
        h = chain_hash(parent_hash, token_ids, extra)
        block_id = self.cached.get(h)
        if block_id is None:
            return None
        block = self.blocks[block_id]
        if block.parent_hash != parent_hash or block.token_ids != token_ids or block.extra != extra:
            return None
        return block_id, h

    def register(self, block_id: int, parent_hash: int | None, token_ids: tuple[int, ...], extra: tuple = ()) -> int:
        """Records a freshly filled block in the prefix cache; returns its hash (the chain's next parent)."""
        h = chain_hash(parent_hash, token_ids, extra)
        if not self.enable_caching:
            return h
        block = self.blocks[block_id]
        if block.block_hash is None and h not in self.cached:
            block.block_hash, block.parent_hash, block.token_ids, block.extra = h, parent_hash, token_ids, extra
            self.cached[h] = block_id
        return h
