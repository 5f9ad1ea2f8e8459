"""The planner's KV arithmetic predicts what our engine allocates: same bytes per token (GQA included), same
number of blocks from a byte budget, and the same default max_model_len."""

import pytest
from floodway.operator.planner.fit import default_max_model_len
from floodway.operator.planner.memory import kv_bytes_per_token
from floodway.operator.planner.model_shape import load_shape


@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("qwen2", {"num_key_value_heads": 1})])
def test_engine_kv_pool_matches_the_plan(tmp_path, tiny_model_path, arch, overrides):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine
    from floodway.engine.models.builtin import write_random_model

    path = tiny_model_path if arch == "llama" else write_random_model(tmp_path / arch, arch, seed=0, **overrides)
    budget = 3 * 2**20 + 12345  # not a whole number of blocks
    engine = LLMEngine(EngineConfig(model=path, device="cpu", dtype="float32", kv_cache_bytes=budget,
                                    max_num_seqs=4, block_size=16))
    shape = load_shape(path)
    per_token = kv_bytes_per_token(shape, "float32")
    assert per_token == 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4
    assert engine.stats().num_total_blocks == budget // (16 * per_token)
    assert engine.max_model_len == default_max_model_len(shape)
