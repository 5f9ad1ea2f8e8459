"""`floodway bench engine --n`: n choices per request against n separate requests, on the tiny model."""

from floodway.engine.bench.parallel import compare, run_once

from tests.unit.engine.conftest import assert_no_leak


def test_n_computes_each_prompt_once_and_holds_fewer_blocks(clean_engine):
    lengths, max_tokens = [20, 40], [8, 8]
    ours = run_once(clean_engine, lengths, max_tokens, 4, True, "t-n")
    sep = run_once(clean_engine, lengths, max_tokens, 4, False, "t-sep")
    assert ours["tokens"] == sep["tokens"] == 4 * 16
    assert ours["prompt_computed"] == sum(lengths)
    assert sep["prompt_computed"] > ours["prompt_computed"]  # even with prefix-cache hits between them
    assert ours["peak_blocks"] < sep["peak_blocks"]
    assert_no_leak(clean_engine)


def test_compare_prints_both_runs_and_their_ratios(clean_engine):
    table = compare(clean_engine, [20, 40], [4, 4], 2)
    assert "| n=2 per request |" in table and "| 2 separate requests |" in table
    assert "n=2 over separate:" in table and "x peak KV blocks" in table
