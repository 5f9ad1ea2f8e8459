"""LoRA exactness: a mixed batch (the base model and adapters of different ranks and targets) decodes greedily
token for token as transformers + peft with each request's adapter (fp32), on the seeded tiny Llama and on SmolLM2's
float weights; with fewer slots and CPU-cache places than adapters (swaps and reloads), chunked prefill and a warm
prefix cache holding the same prompts for another adapter. A wrong scaling or a transposed B fails the comparison."""

import pytest
import torch
from floodway.engine.llm import LLM
from floodway.engine.lora import peft_format
from floodway.engine.sampling_params import SamplingParams

from tests.lora_peft import peft_greedy, random_adapter

NEW_TOKENS = 12
PROMPTS = [[5, 17, 300, 45, 99, 12], [7, 8, 9, 10] * 5, list(range(20, 60))]  # 6, 20 and 40 tokens


def engine_greedy(base: str, adapters: dict[str, str], jobs: list[tuple[str | None, list[int]]], warm: bool = False,
                  **cfg) -> tuple[list[list[int]], LLM]:
    """Every job (adapter name or None, prompt) in one engine run, outputs in job order. warm: the same prompts run
    first on the base model, so their blocks sit in the prefix cache."""
    llm = LLM(base, enable_lora=True, lora_modules=[f"{n}={p}" for n, p in adapters.items()], **cfg)
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0)
    if warm:
        llm.generate([p for _, p in jobs], params)
    for i, (name, prompt) in enumerate(jobs):
        llm.engine.add_request(str(i), prompt, params, lora=name)
    out: dict[str, list[int]] = {}
    while llm.engine.has_unfinished_requests():
        out.update({o.request_id: o.output_token_ids for o in llm.engine.step() if o.finished})
    return [out[str(i)] for i in range(len(jobs))], llm


@pytest.fixture(scope="module")
def tiny_adapters(tiny_model_path, tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("lora")
    return {"all-r8": random_adapter(tiny_model_path, d / "a", r=8, alpha=16, seed=1),
            "qv-r4": random_adapter(tiny_model_path, d / "b", r=4, alpha=8, seed=2, targets=["q_proj", "v_proj"]),
            "mlp-r16-rslora": random_adapter(tiny_model_path, d / "c", r=16, alpha=32, seed=3, rslora=True,
                                             targets=["gate_proj", "up_proj", "down_proj"])}


@pytest.fixture(scope="module")
def tiny_reference(tiny_model_path, tiny_adapters) -> dict[str | None, list[list[int]]]:
    ref = {name: peft_greedy(tiny_model_path, path, PROMPTS, NEW_TOKENS) for name, path in tiny_adapters.items()}
    ref[None] = peft_greedy(tiny_model_path, None, PROMPTS, NEW_TOKENS)
    assert all(ref[name] != ref[None] for name in tiny_adapters)  # each adapter changes the output
    return ref


def test_mixed_batch_equals_peft_with_swaps_chunks_and_prefix_cache(tiny_model_path, tiny_adapters, tiny_reference):
    jobs = [(name, p) for p in PROMPTS for name in (None, *tiny_adapters)]
    got, llm = engine_greedy(tiny_model_path, tiny_adapters, jobs, warm=True, max_loras=2, max_cpu_loras=2,
                             max_num_batched_tokens=32, max_model_len=128)
    assert got == [tiny_reference[name][PROMPTS.index(p)] for name, p in jobs]
    lora = llm.engine.lora
    assert lora.residency.swaps >= 3 and lora.cache.loads > len(tiny_adapters)  # slots swapped, CPU cache reloaded
    assert llm.engine.scheduler.counters.prefix_hits > 0  # the warm-up's blocks served the base rows only


def _mismatch(tiny_model_path, tiny_adapters, tiny_reference, name: str) -> bool:
    llm = LLM(tiny_model_path, enable_lora=True, lora_modules=[f"{name}={tiny_adapters[name]}"])
    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=NEW_TOKENS, temperature=0), lora=name)
    return [o.output_token_ids for o in outs] != tiny_reference[name]


def test_wrong_scaling_is_caught(monkeypatch, tiny_model_path, tiny_adapters, tiny_reference):
    monkeypatch.setattr(peft_format, "scale_of", lambda cfg: cfg["lora_alpha"])  # alpha, not alpha / r
    assert _mismatch(tiny_model_path, tiny_adapters, tiny_reference, "all-r8")
    monkeypatch.setattr(peft_format, "scale_of", lambda cfg: cfg["lora_alpha"] / cfg["r"])  # use_rslora ignored
    assert _mismatch(tiny_model_path, tiny_adapters, tiny_reference, "mlp-r16-rslora")


def test_transposed_b_is_caught(monkeypatch, tiny_model_path, tiny_adapters, tiny_reference):
    def place_b_transposed(big_a, big_b, a, b, row, col):  # B's values read in the other order, same shape
        r = a.shape[0]
        big_a[:, row:row + r] = a.t()
        big_b[row:row + r, col:col + b.shape[0]] = b.reshape(r, b.shape[0])

    monkeypatch.setattr(peft_format, "place", place_b_transposed)
    assert _mismatch(tiny_model_path, tiny_adapters, tiny_reference, "all-r8")


def test_smollm2_mixed_batch_equals_peft(smollm2_path, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"])
               for q in ("What is the capital of France?", "List three fruits.")]
    adapters = {"r8": random_adapter(smollm2_path, tmp_path / "a", r=8, alpha=16, seed=1, gain=0.5),
                "r16-qv": random_adapter(smollm2_path, tmp_path / "b", r=16, alpha=16, seed=2, gain=1.0,
                                         targets=["q_proj", "v_proj"])}
    ref = {name: peft_greedy(smollm2_path, path, prompts, NEW_TOKENS) for name, path in adapters.items()}
    ref[None] = peft_greedy(smollm2_path, None, prompts, NEW_TOKENS)
    assert all(ref[name] != ref[None] for name in adapters)
    jobs = [(name, p) for p in prompts for name in (None, *adapters)]
    got, _ = engine_greedy(smollm2_path, adapters, jobs, quantization="none", dtype="float32", max_loras=2,
                           max_model_len=256)
    assert got == [ref[name][prompts.index(p)] for name, p in jobs]
    assert torch.get_num_threads() == 1
