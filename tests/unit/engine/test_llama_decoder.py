"""Our Llama-family decoder (engine/models/llama.py) against transformers' own forward of the same weights: logits
within fp32 tolerance for mixed prefill + decode steps over the paged cache, on random small configs (GQA, tied and
untied head, llama3 rope scaling, Qwen2's q/k/v bias); which models it takes."""

import copy

import pytest
import torch
from floodway.engine import kv_cache, step_inputs
from floodway.engine.models import llama
from floodway.engine.step_inputs import SeqInput

SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8,
             max_position_embeddings=256)
CONFIGS = {
    "llama-gqa-tied": ("llama", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "llama-untied-llama3-rope": ("llama", dict(
        num_key_value_heads=4, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32))),
    "llama-mha-bias": ("llama", dict(num_key_value_heads=8, attention_bias=True, mlp_bias=True)),
    "qwen2": ("qwen2", dict(num_key_value_heads=2, use_sliding_window=False)),
    "mistral": ("mistral", dict(num_key_value_heads=2, head_dim=16, sliding_window=None)),
}


def hf_model(arch: str, overrides: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(arch, **SMALL, **overrides)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
    for p in model.parameters():  # biases start at zero and norms at one: moved, so that using them is checked too
        if p.ndim == 1:
            p.data += torch.randn_like(p) * 0.1
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_equal_transformers_for_mixed_steps(name):
    arch, overrides = CONFIGS[name]
    ref = hf_model(arch, overrides)
    assert llama.supports(ref)
    ours = llama.LlamaDecoder(copy.deepcopy(ref), max_model_len=256)
    assert (ours.lm_head.weight is ours.embed_tokens.weight) == bool(ref.config.tie_word_embeddings)
    cfg = ref.config
    shape = kv_cache.KVShape(cfg.num_hidden_layers, cfg.num_key_value_heads,
                             getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads, 4,
                             torch.float32)
    ks, vs = kv_cache.allocate(shape, 40, torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (9, 23, 14)]
    tables = [list(range(i * 12, i * 12 + 12)) for i in range(3)]
    # Step 1: two prefills, the second one cut short (a chunk); step 2: the first decodes its next token, the
    # second finishes its prompt over its cached part, the third prefills whole.
    step1 = [SeqInput(prompts[0], 0, tables[0], True), SeqInput(prompts[1][:10], 0, tables[1], False)]
    step2 = [SeqInput([77], 9, tables[0], True), SeqInput(prompts[1][10:], 10, tables[1], True, num_prompt_logits=2),
             SeqInput(prompts[2], 0, tables[2], True)]
    seqs_so_far = [prompts[0] + [77], prompts[1], prompts[2]]
    with torch.inference_mode():
        full = [ref(torch.tensor([s])).logits[0] for s in seqs_so_far]
        for step, want in ((step1, [full[0][8]]), (step2, [full[0][9], full[1][22], full[2][13], full[1][10:12]])):
            meta, ids, pos, keep = step_inputs.build(step, 4, ks, vs, "cpu", path="sdpa")
            got = ours(input_ids=ids, position_ids=pos, logits_to_keep=keep, floodway_meta=meta).logits[0]
            torch.testing.assert_close(got, torch.cat([w.reshape(-1, cfg.vocab_size) for w in want]),
                                       atol=2e-5, rtol=2e-5)


def test_only_models_it_computes_as_transformers_does():
    dynamic = hf_model("llama", dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)))
    assert not llama.supports(dynamic)  # its frequencies change with the sequence length
    assert not llama.supports(hf_model("llama", dict(hidden_act="gelu")))
    from transformers import GPT2Config, GPT2LMHeadModel

    assert not llama.supports(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)))


def test_engine_runs_ours_where_supported_and_transformers_when_asked(tiny_model_path):
    from floodway.engine.config import EngineConfig
    from floodway.engine.model_runner import ModelRunner

    cfg = dict(model=tiny_model_path, max_model_len=64, num_kv_blocks=8)
    assert isinstance(ModelRunner(EngineConfig(**cfg)).model, llama.LlamaDecoder)
    assert type(ModelRunner(EngineConfig(**cfg, model_impl="transformers")).model).__name__ == "LlamaForCausalLM"
    with pytest.raises(ValueError, match="model_impl"):
        EngineConfig(model_impl="vllm").validate()
