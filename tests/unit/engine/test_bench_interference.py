"""`floodway bench engine --tpot-slo-ms`'s run on the tiny model: it drives the engine to the end, leak-free."""

from floodway.engine.bench.interference import run_once

from tests.unit.engine.conftest import assert_no_leak


def test_run_once_measures_decodes_while_prompts_arrive(clean_engine):
    r = run_once(clean_engine, 0.0, decoders=2, decode_tokens=4, long_prompts=1, long_len=40, every_steps=2, seed=0)
    assert r["steps"] > 0 and r["tpot_p50_ms"] > 0 and r["long_ttft_p50_s"] > 0
    assert_no_leak(clean_engine)
