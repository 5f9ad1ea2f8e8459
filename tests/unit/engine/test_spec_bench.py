"""`floodway bench engine --workload spec` on the tiny model: both engines run every cell to the end, leak-free,
with the same greedy outputs, and the table reports ratios and acceptance."""

from floodway.engine.bench.speculative import compare, prompts

from tests.unit.engine.conftest import assert_no_leak


def test_compare_runs_each_cell_without_and_with_speculation(tiny_model_path):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    settings = dict(model=tiny_model_path, max_model_len=512, num_kv_blocks=128, max_num_seqs=4)
    plain = LLMEngine(EngineConfig(**settings))
    spec = LLMEngine(EngineConfig(**settings, speculative_config='{"method": "ngram", "num_speculative_tokens": 3}'))
    assert len(prompts(plain.tokenizer, "grounded", 5)) == 5
    lines: list[str] = []
    compare(plain, spec, plain.tokenizer, [1, 3], 10, 3, lines.append, rounds=2)
    rows = [line for line in lines if line.startswith(("| grounded", "| chat"))]
    assert [r.split(" | ")[:2] for r in rows] == [["| grounded", "1"], ["| grounded", "3"], ["| chat", "1"],
                                                  ["| chat", "3"]]
    assert all(r.endswith("| yes |") for r in rows)  # float32: greedy outputs identical
    assert spec.speculator.counters.num_draft_tokens > 0
    for engine in (plain, spec):
        assert_no_leak(engine)
