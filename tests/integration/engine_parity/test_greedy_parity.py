"""Greedy outputs equal transformers `generate` token for token (fp32, CPU), across architectures and engine
modes: prefix caching and chunked prefill on and off, and a KV pool small enough to force preemption."""

import random

import pytest

NEW_TOKENS = 16
MODES = {
    "default": dict(),
    "no-cache-no-chunk": dict(enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=512),
    "tiny-pool-preempts": dict(num_kv_blocks=12, max_num_batched_tokens=40, max_num_seqs=8),
}


def prompts_and_reference(path: str):
    import torch
    from transformers import AutoModelForCausalLM

    rng = random.Random(0)
    shared = [rng.randrange(4, 4096) for _ in range(40)]  # a shared prefix exercises the prefix cache
    prompts = [[rng.randrange(4, 4096) for _ in range(rng.randrange(1, 80))] for _ in range(8)]
    prompts += [shared + [rng.randrange(4, 4096) for _ in range(n)] for n in (0, 1, 9, 24)]
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ref = []
    for p in prompts:  # one at a time: no padding in the reference
        out = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                          max_new_tokens=NEW_TOKENS, do_sample=False)
        ref.append(out[0, len(p):].tolist())
    return prompts, ref


@pytest.fixture(scope="module", params=["llama", "qwen2", "mistral", "gpt2"])
def model(request, tmp_path_factory, tiny_model_path):
    from floodway.engine.models.builtin import write_random_model

    arch = request.param
    path = tiny_model_path if arch == "llama" else write_random_model(tmp_path_factory.mktemp(arch), arch, seed=1)
    return (arch, path, *prompts_and_reference(path))


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_equals_transformers_generate(model, mode):
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams

    arch, path, prompts, ref = model
    llm = LLM(path, max_model_len=256, **MODES[mode])
    # Submitted twice in one batch (the second copies can hit the cache of the first once those finish).
    outs = llm.generate(prompts + prompts[::-1], SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0))
    got = [o.output_token_ids for o in outs]
    assert got == ref + ref[::-1], f"{arch}/{mode}"
    if mode == "tiny-pool-preempts":
        assert llm.engine.stats().num_preemptions_total > 0
    again = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0))
    assert [o.output_token_ids for o in again] == ref
    if MODES[mode].get("enable_prefix_caching", True):
        assert any(o.num_cached_tokens > 0 for o in again)
    pool = llm.engine.kv.pool
    assert pool.num_free == pool.num_total and all(b.ref_cnt == 0 for b in pool.blocks)
