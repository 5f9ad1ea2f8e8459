"""Model configs shaped like real checkpoints (their published config.json fields), written to temporary
folders, and an isolated Hugging Face cache."""

import json

import pytest

# Public config.json fields of the real models (shape only; no weights are involved).
LLAMA2_7B = dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, tie_word_embeddings=False,
                 max_position_embeddings=4096, torch_dtype="float16")
LLAMA3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                 max_position_embeddings=8192, torch_dtype="bfloat16")
QWEN25_7B = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                 max_position_embeddings=32768, torch_dtype="bfloat16")
MIXTRAL_8X7B = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
                    num_experts_per_tok=2, max_position_embeddings=32768, torch_dtype="bfloat16")
GPT2_SMALL = dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)


def write_config(folder, cfg: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


@pytest.fixture
def configs() -> dict[str, dict]:
    """Fresh copies, so a test may edit its own."""
    return {name: dict(cfg) for name, cfg in (("llama2-7b", LLAMA2_7B), ("llama3-8b", LLAMA3_8B),
                                              ("qwen2.5-7b", QWEN25_7B), ("mixtral-8x7b", MIXTRAL_8X7B),
                                              ("gpt2", GPT2_SMALL))}


@pytest.fixture
def llama2_7b(tmp_path) -> str:
    return write_config(tmp_path / "llama-2-7b", LLAMA2_7B)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty hub cache that the planner (and huggingface_hub) will read."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache
