"""Logprobs, prompt logprobs and min_tokens through the engine (tiny model), against transformers' own forward
of the same tokens: chunked prefill, prefix-cache hits and max_tokens 0 included."""

import pytest
import torch
from floodway.engine.sampling_params import SamplingParams

PROMPT = [1] + list(range(30, 130))  # 101 tokens: the engine's 64-token step budget prefills it in two chunks


@pytest.fixture(scope="module")
def hf_logprobs(tiny_model_path):
    """ids -> log_softmax of transformers' logits at every position (fp32, eager attention)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()

    def run(ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)

    return run


def _final(run_to_end, engine, rid, prompt, params):
    engine.add_request(rid, prompt, params)
    outs = run_to_end(engine)[rid]
    return outs, outs[-1]


def _assert_top(top: dict[int, float], ref: torch.Tensor, n: int):
    vals, idx = ref.topk(n)
    assert list(top) == idx.tolist()
    assert list(top.values()) == pytest.approx(vals.tolist(), abs=1e-4)


def test_top_logprobs_of_each_generated_token_match_transformers(run_to_end, clean_engine, hf_logprobs):
    outs, final = _final(run_to_end, clean_engine, "g", PROMPT[:20],
                         SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=3))
    lps = sum((o.new_logprobs for o in outs), [])
    tops = sum((o.new_top_logprobs for o in outs), [])
    ref = hf_logprobs(PROMPT[:20] + final.output_token_ids)
    for i, token in enumerate(final.output_token_ids):
        row = ref[20 - 1 + i]  # the position before the token scores it
        assert lps[i] == pytest.approx(row[token].item(), abs=1e-4)
        _assert_top(tops[i], row, 3)


@pytest.mark.parametrize("warm_prefix", [False, True], ids=["cold", "prefix-cached"])
def test_prompt_logprobs_cover_every_prompt_token_across_chunks(run_to_end, clean_engine, hf_logprobs, warm_prefix):
    if warm_prefix:  # the prompt's blocks are cached: a request asking for prompt logprobs must not reuse them
        _final(run_to_end, clean_engine, "warm", PROMPT, SamplingParams(max_tokens=1))
    _, final = _final(run_to_end, clean_engine, "p", PROMPT, SamplingParams(max_tokens=2, prompt_logprobs=2))
    ref = hf_logprobs(PROMPT)
    assert len(final.prompt_logprobs) == len(PROMPT) and final.prompt_logprobs[0] is None
    assert final.prompt_top_logprobs[0] is None
    for pos in range(1, len(PROMPT)):
        assert final.prompt_logprobs[pos] == pytest.approx(ref[pos - 1, PROMPT[pos]].item(), abs=1e-4)
        _assert_top(final.prompt_top_logprobs[pos], ref[pos - 1], 2)


def test_max_tokens_zero_prefills_only(run_to_end, clean_engine, hf_logprobs):
    outs, final = _final(run_to_end, clean_engine, "z", PROMPT[:30], SamplingParams(max_tokens=0, prompt_logprobs=0))
    assert len(outs) == 1 and final.finished and final.finish_reason == "length"
    assert final.output_token_ids == [] and final.text == "" and final.new_logprobs is None
    assert final.prompt_logprobs[1:] == pytest.approx(
        [hf_logprobs(PROMPT[:30])[p - 1, PROMPT[p]].item() for p in range(1, 30)], abs=1e-4)
    assert final.prompt_top_logprobs[1:] == [None] * 29  # 0 alternatives asked


def test_min_tokens_holds_back_stop_tokens(run_to_end, clean_engine):
    greedy = dict(temperature=0, max_tokens=8)
    _, free = _final(run_to_end, clean_engine, "free", PROMPT[:10], SamplingParams(ignore_eos=True, **greedy))
    first = free.output_token_ids[0]
    _, stopped = _final(run_to_end, clean_engine, "stop", PROMPT[:10],
                        SamplingParams(stop_token_ids=[first], ignore_eos=True, **greedy))
    assert stopped.output_token_ids == [first] and stopped.finish_reason == "stop"
    _, held = _final(run_to_end, clean_engine, "held", PROMPT[:10],
                     SamplingParams(stop_token_ids=[first], ignore_eos=True, min_tokens=4, **greedy))
    assert first not in held.output_token_ids[:4] and len(held.output_token_ids) >= 4
