"""The pure parts of `floodway bench routing`: conversations from the Mooncake rows, the unshared twin, the
rendered text and the single-engine bound."""

import pytest
from floodway.operator.bench.routing import (
    BLOCK_WORDS,
    conversations,
    figures,
    first_turns,
    render,
    single_engine_bound,
    spread,
    without_shared_prefixes,
)

ROWS = [{"hash_ids": [0, 1, 2]}, {"hash_ids": [0, 5]}, {"hash_ids": [7]}, {"hash_ids": [0, 1, 2, 3, 4]},
        {"hash_ids": [0, 9, 8]}, {"hash_ids": [0, 5, 6, 7]}]


def test_conversations_take_every_turn_of_the_first_ones_in_order_cut_to_max_blocks():
    assert conversations(ROWS, 2, 4) == [[0, 1, 2], [0, 5], [0, 1, 2, 3], [0, 5, 6, 7]]
    unshared = without_shared_prefixes(conversations(ROWS, 2, 4))
    assert [len(r) for r in unshared] == [3, 2, 4, 4] and len({b for r in unshared for b in r}) == 13
    assert first_turns(conversations(ROWS, 2, 4)) == [True, True, False, False]


def test_render_repeats_a_block_exactly_and_changes_with_the_salt():
    words = ["ab", "cd", "ef"]
    one, two = render([4, 5], 1, words), render([4, 6], 1, words)
    assert one.split()[:BLOCK_WORDS] == two.split()[:BLOCK_WORDS] and one != two
    assert len(one.split()) == 2 * BLOCK_WORDS and render([4], 2, words) != render([4], 1, words)


def test_single_engine_bound_counts_leading_full_blocks_seen_before_never_the_last_token():
    a = list(range(32))
    assert single_engine_bound([a, a]) == (16, 64)  # the second: block 0 hits, block 1 holds the last token
    assert single_engine_bound([a, a + [99]]) == (32, 65)
    assert single_engine_bound([a, [7] + a]) == (0, 65)  # shifted: no leading block matches
    assert spread([1, 1, 4]) == 2.0


def test_rounds_pool_tokens_and_ttfts_and_average_each_rounds_spreads():
    one = {"sent": 3, "ok": 3, "hits": [10, 0], "queries": [20, 20], "served": [2, 1], "ttft": [0.1, 0.2, 0.9],
           "later": [0.1]}
    two = {"sent": 3, "ok": 2, "hits": [0, 30], "queries": [20, 40], "served": [1, 1], "ttft": [0.3, 0.4],
           "later": [0.3]}
    f = figures([one, two])
    assert (f["sent"], f["ok"], f["hit"], f["queries"]) == (6, 5, 40 / 100, 100)
    assert (f["p50"], f["later_p50"]) == (0.3, 0.1)  # of all five TTFTs, of both later turns (nearest rank)
    assert f["req_spread"] == pytest.approx((2 / 1.5 + 1.0) / 2)  # each round's own, averaged: not pooled (1.2)
    assert f["prefill_spread"] == pytest.approx((20 / 15 + 20 / 15) / 2)
    assert figures([one])["req_spread"] == spread([2, 1])
