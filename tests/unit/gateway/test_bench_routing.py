"""The pure parts of `floodway bench routing`: conversations from the Mooncake rows, the unshared twin, the
rendered text and the single-engine bound."""

import pytest
from floodway.operator.gateway.bench_routing import (
    BLOCK_WORDS,
    conversations,
    first_turns,
    render,
    single_engine_bound,
    spread,
    without_shared_prefixes,
)

pytestmark = pytest.mark.unit

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
