"""Maps sequences to KV blocks: prefix-cache lookup, slot allocation, caching of filled blocks, sharing between
the sequences of one request (n > 1) with copy-on-write of a shared partial block, freeing."""

from floodway.engine.block_pool import BlockPool
from floodway.engine.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def extra_keys(req: Request) -> tuple:
    """What a block's KV depends on besides its tokens: the LoRA adapter (its load's id), so no block is shared
    across adapters or with the base model."""
    return () if req.lora is None else (("lora", req.lora.id),)


class KVManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True):
        self.pool = BlockPool(num_blocks, enable_caching)
        self.block_size = block_size
        # Keyed by sequence (identity): the n sequences of one request share its request id.
        self.req_blocks: dict[Request, list[int]] = {}
        self.req_hashes: dict[Request, list[int]] = {}  # chained hashes of the sequence's filled blocks, in order
        # (source, destination) block copies the next forward must make before it writes (copy-on-write).
        self.copies: list[tuple[int, int]] = []

    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def computed_prefix(self, req: Request) -> tuple[list[int], list[int]]:
        """Cached blocks (ids, hashes) matching the request's leading full blocks; never the last token's block
        once the rest is covered, since the last token must be computed to get its logits. None for a request
        asking for prompt logprobs: they need every prompt position's logits."""
        ids, hashes, parent = [], [], None
        max_blocks = (req.num_tokens - 1) // self.block_size if req.params.prompt_logprobs is None else 0
        for i in range(max_blocks):
            tokens = tuple(req.all_token_ids[i * self.block_size:(i + 1) * self.block_size])
            hit = self.pool.lookup(parent, tokens, extra_keys(req))
            if hit is None:
                break
            ids.append(hit[0])
            hashes.append(hit[1])
            parent = hit[1]
        return ids, hashes

    def _plan(self, req: Request, num_new_tokens: int, hit_ids: list[int]) -> tuple[list[int], int, int | None]:
        """(the sequence's blocks, new blocks it needs, index of a shared partial block to copy or None)."""
        blocks = self.req_blocks.get(req, [])
        num_computed = req.num_computed_tokens + len(hit_ids) * self.block_size
        need = max(self.blocks_needed(num_computed + num_new_tokens) - len(blocks) - len(hit_ids), 0)
        return blocks, need, self._shared_partial(blocks, num_computed)

    def free_blocks_needed(self, req: Request, num_new_tokens: int, hit_ids: list[int] = ()) -> int:
        """Free blocks allocate() would take from the pool: new ones, a private copy of a shared partial block, and
        the cache hits no running sequence holds."""
        _, need, shared = self._plan(req, num_new_tokens, hit_ids)
        return need + (shared is not None) + sum(1 for b in hit_ids if self.pool.blocks[b].ref_cnt == 0)

    def allocate(self, req: Request, num_new_tokens: int, hit_ids: list[int] = (), hit_hashes: list[int] = ()) -> bool:
        """Gives the request blocks for num_new_tokens more tokens (after its computed ones and any cache hits),
        and a private copy of a shared block its next token would write into. Returns False, changing nothing,
        when the pool cannot supply them."""
        if self.free_blocks_needed(req, num_new_tokens, hit_ids) > self.pool.num_free:
            return False
        blocks, need, shared = self._plan(req, num_new_tokens, hit_ids)
        if shared is not None:
            copy = self.pool.allocate(1)[0]
            self.copies.append((blocks[shared], copy))
            self.pool.free([blocks[shared]])  # still held by the sequences it is shared with
            blocks = blocks[:shared] + [copy] + blocks[shared + 1:]
        self.pool.touch(list(hit_ids))
        self.req_blocks[req] = blocks + list(hit_ids) + self.pool.allocate(need)
        self.req_hashes.setdefault(req, []).extend(hit_hashes)
        return True

    def _shared_partial(self, blocks: list[int], num_computed: int) -> int | None:
        """Index of the partly filled block the next token goes into, when other sequences share it."""
        i = num_computed // self.block_size
        if num_computed % self.block_size and i < len(blocks) and self.pool.blocks[blocks[i]].ref_cnt > 1:
            return i
        return None

    def fork(self, parent: Request, child: Request) -> None:
        """Gives child the parent's blocks (one more reference each) and cached hashes: a second sequence over
        the same computed tokens, without copying any KV."""
        blocks = self.req_blocks[parent]
        self.pool.touch(blocks)
        self.req_blocks[child] = list(blocks)
        self.req_hashes[child] = list(self.req_hashes.get(parent, []))

    def take_copies(self) -> list[tuple[int, int]]:
        copies, self.copies = self.copies, []
        return copies

    def cache_filled_blocks(self, req: Request) -> None:
        """Registers the request's newly filled (fully computed) blocks in the prefix cache."""
        hashes = self.req_hashes.setdefault(req, [])
        blocks = self.req_blocks[req]
        num_full = min(req.num_computed_tokens, req.num_tokens) // self.block_size
        parent = hashes[-1] if hashes else None
        for i in range(len(hashes), num_full):
            tokens = tuple(req.all_token_ids[i * self.block_size:(i + 1) * self.block_size])
            parent = self.pool.register(blocks[i], parent, tokens, extra_keys(req))
            hashes.append(parent)

    def trim(self, req: Request, num_tokens: int) -> None:
        """Frees the sequence's blocks beyond the first num_tokens tokens' (slots of rejected draft tokens): they
        were allocated for this sequence alone and never cached."""
        blocks = self.req_blocks.get(req, [])
        keep = self.blocks_needed(num_tokens)
        if len(blocks) > keep:
            self.pool.free(list(reversed(blocks[keep:])))
            del blocks[keep:]

    def free(self, req: Request) -> None:
        """Drops the sequence's references to its blocks; its tail blocks go to the free queue first, so they are
        evicted before the shared prefix blocks."""
        blocks = self.req_blocks.pop(req, [])
        self.req_hashes.pop(req, None)
        self.pool.free(list(reversed(blocks)))

    def block_table(self, req: Request) -> list[int]:
        return self.req_blocks.get(req, [])
