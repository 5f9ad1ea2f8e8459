"""Maps requests to KV blocks: prefix-cache lookup, slot allocation, caching of filled blocks, freeing."""

from floodway.engine.block_pool import BlockPool
from floodway.engine.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True):
        self.pool = BlockPool(num_blocks, enable_caching)
        self.block_size = block_size
        self.req_blocks: dict[str, list[int]] = {}
        self.req_hashes: dict[str, list[int]] = {}  # chained hashes of the request's filled blocks, in order

    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def computed_prefix(self, req: Request) -> tuple[list[int], list[int]]:
        """Cached blocks (ids, hashes) matching the request's leading full blocks; never the last token's block
        once the rest is covered, since the last token must be computed to get its logits."""
        ids, hashes, parent = [], [], None
        max_blocks = (req.num_tokens - 1) // self.block_size
        for i in range(max_blocks):
            tokens = tuple(req.all_token_ids[i * self.block_size:(i + 1) * self.block_size])
            hit = self.pool.lookup(parent, tokens)
            if hit is None:
                break
            ids.append(hit[0])
            hashes.append(hit[1])
            parent = hit[1]
        return ids, hashes

    def allocate(self, req: Request, num_new_tokens: int, hit_ids: list[int] = (), hit_hashes: list[int] = ()) -> bool:
        """Gives the request blocks for num_new_tokens more tokens (after its computed ones and any cache hits).
        Returns False, changing nothing, when the pool cannot supply them."""
        blocks = self.req_blocks.get(req.request_id, [])
        num_computed = req.num_computed_tokens + len(hit_ids) * self.block_size
        need = self.blocks_needed(num_computed + num_new_tokens) - len(blocks) - len(hit_ids)
        hits_from_free = sum(1 for b in hit_ids if self.pool.blocks[b].ref_cnt == 0)
        if need + hits_from_free > self.pool.num_free:
            return False
        self.pool.touch(list(hit_ids))
        new_blocks = self.pool.allocate(max(need, 0))
        self.req_blocks[req.request_id] = blocks + list(hit_ids) + new_blocks
        self.req_hashes.setdefault(req.request_id, []).extend(hit_hashes)
        return True

    def cache_filled_blocks(self, req: Request) -> None:
        """Registers the request's newly filled (fully computed) blocks in the prefix cache."""
        hashes = self.req_hashes.setdefault(req.request_id, [])
        blocks = self.req_blocks[req.request_id]
        num_full = min(req.num_computed_tokens, req.num_tokens) // self.block_size
        parent = hashes[-1] if hashes else None
        for i in range(len(hashes), num_full):
            tokens = tuple(req.all_token_ids[i * self.block_size:(i + 1) * self.block_size])
            parent = self.pool.register(blocks[i], parent, tokens)
            hashes.append(parent)

    def free(self, req: Request) -> None:
        """Returns all of the request's blocks; its tail blocks go to the free queue first, so they are evicted
        before the shared prefix blocks."""
        blocks = self.req_blocks.pop(req.request_id, [])
        self.req_hashes.pop(req.request_id, None)
        self.pool.free(list(reversed(blocks)))

    def block_table(self, req: Request) -> list[int]:
        return self.req_blocks.get(req.request_id, [])
