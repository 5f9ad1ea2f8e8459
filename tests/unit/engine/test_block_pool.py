import pytest
from floodway.engine.block_pool import BlockPool
from floodway.engine.kv_manager import KVManager
from floodway.engine.outputs import RequestMetrics
from floodway.engine.request import Request
from floodway.engine.sampling_params import SamplingParams


def req(rid, tokens):
    return Request(rid, list(tokens), SamplingParams(), RequestMetrics(0.0))


def test_allocate_free_lru_order_and_negative_ref_refused():
    pool = BlockPool(4)
    a = pool.allocate(2)
    b = pool.allocate(2)
    assert pool.num_free == 0
    with pytest.raises(RuntimeError):
        pool.allocate(1)
    pool.free(b[::-1])
    pool.free(a[::-1])
    # Least recently freed first: b's tail, b's head, then a's.
    assert pool.allocate(4) == [b[1], b[0], a[1], a[0]]
    pool.free([0, 1, 2, 3])
    with pytest.raises(RuntimeError, match="ref count"):
        pool.free([0])


def test_cache_hit_is_verified_against_stored_tokens():
    pool = BlockPool(4)
    [blk] = pool.allocate(1)
    h = pool.register(blk, None, (1, 2, 3, 4))
    assert pool.lookup(None, (1, 2, 3, 4)) == (blk, h)
    assert pool.lookup(None, (1, 2, 3, 5)) is None
    assert pool.lookup(123, (1, 2, 3, 4)) is None  # same tokens, different parent
    # Forge a colliding map entry: a hash pointing at a block that holds other tokens is not served.
    pool.cached[hash((None, (9, 9, 9, 9), ()))] = blk
    assert pool.lookup(None, (9, 9, 9, 9)) is None


def test_freed_cached_blocks_are_reused_until_evicted():
    kv = KVManager(num_blocks=6, block_size=4)
    r1 = req("a", range(10))  # 2 full blocks + 2 tokens
    assert kv.allocate(r1, 10)
    r1.num_computed_tokens = 10
    kv.cache_filled_blocks(r1)
    first_two = kv.block_table(r1)[:2]
    kv.free(r1)
    assert kv.pool.num_free == 6
    r2 = req("b", list(range(8)) + [50, 51, 52])
    hit_ids, hit_hashes = kv.computed_prefix(r2)
    assert hit_ids == first_two
    assert kv.allocate(r2, 3, hit_ids, hit_hashes)
    assert kv.block_table(r2)[:2] == first_two
    assert kv.pool.num_free == 3
    kv.free(r2)
    # Allocating everything evicts the cache.
    blocks = kv.pool.allocate(6)
    assert kv.pool.cached == {}
    kv.pool.free(blocks)


def test_hit_never_covers_the_last_prompt_token():
    kv = KVManager(num_blocks=8, block_size=4)
    r1 = req("a", range(8))
    assert kv.allocate(r1, 8)
    r1.num_computed_tokens = 8
    kv.cache_filled_blocks(r1)
    r2 = req("b", range(8))  # identical prompt, exactly two blocks
    hit_ids, _ = kv.computed_prefix(r2)
    assert len(hit_ids) == 1  # the second block holds the last token, which must be recomputed
    kv.free(r1)


def test_allocate_failure_changes_nothing():
    kv = KVManager(num_blocks=2, block_size=4)
    r = req("a", range(12))
    assert not kv.allocate(r, 12)
    assert kv.pool.num_free == 2 and kv.block_table(r) == []
