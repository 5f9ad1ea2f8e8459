"""The parameter estimate equals what transformers builds from the same config (on the meta device: no memory)."""

import pytest
from floodway.engine.models.builtin import ARCHITECTURES, model_config
from floodway.operator.planner.model_shape import shape_from_config

EXTRA = {
    "gpt2-tied": model_config("gpt2", tie_word_embeddings=True),
    "llama-biases-head-dim": model_config("llama", tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                          head_dim=48),
    "mixtral": dict(model_type="mixtral", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                    vocab_size=1000),
    "qwen2_moe": dict(model_type="qwen2_moe", hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                      shared_expert_intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, vocab_size=1000,
                      decoder_sparse_step=1, mlp_only_layers=[]),
    "qwen3": dict(model_type="qwen3", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1000),
}


@pytest.mark.parametrize("name,cfg", [*((a, model_config(a)) for a in ARCHITECTURES), *EXTRA.items()])
def test_estimate_equals_transformers_parameter_count(name, cfg):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    assert shape_from_config(cfg, name, "test").params == sum(p.numel() for p in model.parameters())
