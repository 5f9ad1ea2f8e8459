"""Penalties, logit_bias and min_tokens in the batched sampler against transformers' logits processors (presence
and frequency have none: OpenAI's documented formula is written out here), and logprobs of the raw distribution."""

import pytest
import torch
from floodway.engine.sampler import apply_penalties, sample, token_logprobs
from floodway.engine.sampling_params import SamplingParams
from transformers import (
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

V = 64
EOS = {2, 7}


def _history(seed: int, prompt_len: int, output_len: int) -> tuple[list[int], list[int]]:
    g = torch.Generator().manual_seed(seed)
    # Few distinct ids, so tokens repeat and counts above 1 occur.
    ids = torch.randint(0, 20, (prompt_len + output_len,), generator=g).tolist()
    return ids[:prompt_len], ids[prompt_len:]


def _reference(logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> torch.Tensor:
    """One row through transformers' processors in the sampler's order, then OpenAI's presence/frequency formula."""
    scores, ids = logits[None].clone(), torch.tensor([prompt + output])
    if p.logit_bias:
        scores = SequenceBiasLogitsProcessor([[[t], b] for t, b in p.logit_bias.items()])(ids, scores)
    if p.min_tokens:
        stops = sorted({*p.stop_token_ids, *(() if p.ignore_eos else EOS)})
        scores = MinNewTokensLengthLogitsProcessor(len(prompt), p.min_tokens, stops)(ids, scores)
    if p.repetition_penalty != 1.0:
        scores = RepetitionPenaltyLogitsProcessor(p.repetition_penalty)(ids, scores)
    counts = torch.bincount(torch.tensor(output, dtype=torch.long), minlength=V).float()
    # OpenAI: mu[j] -> mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence
    return scores[0] - counts * p.frequency_penalty - (counts > 0).float() * p.presence_penalty


ROWS = [
    SamplingParams(),  # untouched row in a penalized batch
    SamplingParams(presence_penalty=1.5),
    SamplingParams(frequency_penalty=0.7),
    SamplingParams(presence_penalty=-1.0, frequency_penalty=-0.5),  # negative: encourages repeats
    SamplingParams(repetition_penalty=1.3),
    SamplingParams(repetition_penalty=0.8),
    SamplingParams(logit_bias={3: 100.0, 5: -100.0, 11: 2.5}),
    SamplingParams(min_tokens=10, stop_token_ids=[9]),  # 4 outputs so far: EOS and 9 masked
    SamplingParams(min_tokens=10, ignore_eos=True, stop_token_ids=[9]),  # only 9 masked
    SamplingParams(min_tokens=2),  # reached: nothing masked
    SamplingParams(presence_penalty=0.4, frequency_penalty=0.3, repetition_penalty=1.2, logit_bias={1: -3.0},
                   min_tokens=6),
]


def test_penalties_match_transformers_processors_row_by_row():
    logits = torch.randn(len(ROWS), V, generator=torch.Generator().manual_seed(0)) * 3
    hist = [_history(i, 12, 4 if i != 9 else 3) for i in range(len(ROWS))]
    got = apply_penalties(logits, ROWS, [h[0] for h in hist], [h[1] for h in hist], EOS)
    for i, p in enumerate(ROWS):
        want = _reference(logits[i], p, *hist[i])
        assert torch.equal(torch.isinf(got[i]), torch.isinf(want)), f"row {i}: masks differ"
        finite = ~torch.isinf(want)
        torch.testing.assert_close(got[i][finite], want[finite], msg=f"row {i} ({p})")
    assert torch.equal(got[0], logits[0])
    assert torch.isinf(got[7][[2, 7, 9]]).all() and torch.isinf(got[8][9]) and not torch.isinf(got[8][[2, 7]]).any()
    assert not torch.isinf(got[9]).any()


def test_penalties_steer_greedy_choice_and_logprobs_stay_raw():
    logits = torch.zeros(3, V)
    logits[:, 4] = 5.0  # the favourite, already repeated in the output
    logits[:, 6] = 4.0
    params = [SamplingParams(temperature=0, frequency_penalty=0.6, logprobs=2),
              SamplingParams(temperature=0, logit_bias={10: 100.0}, logprobs=0),
              SamplingParams(temperature=0, min_tokens=3, logprobs=1)]
    logits[2, 2] = 9.0  # EOS would win but min_tokens holds it back
    out = sample(logits, params, [None] * 3, None, [[1], [1], [1]], [[4, 4], [], [4]], EOS)
    assert out.tokens == [6, 10, 4]
    raw = torch.log_softmax(logits, -1)
    assert out.logprobs == pytest.approx([raw[i, t].item() for i, t in enumerate(out.tokens)])
    # The raw favourites (what the model said), not the penalized ones.
    assert list(out.top_logprobs[0]) == [4, 6] and out.top_logprobs[1] is None
    assert out.top_logprobs[2] == pytest.approx({2: raw[2, 2].item()})


def test_top_logprobs_are_the_log_softmax_top_n_per_row():
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(3))
    chosen, top = token_logprobs(logits, torch.tensor([0, 1, 2, 3]), [0, 1, 5, 20])
    lp = torch.log_softmax(logits, -1)
    assert chosen == pytest.approx(lp[torch.arange(4), torch.arange(4)].tolist())
    assert top[0] is None
    for i, n in [(1, 1), (2, 5), (3, 20)]:
        vals, idx = lp[i].topk(n)
        assert top[i] == pytest.approx(dict(zip(idx.tolist(), vals.tolist(), strict=True)))


def test_masked_alternatives_stay_json_encodable():
    logits = torch.full((1, V), float("-inf"))
    logits[0, 3] = 0.0  # a grammar mask leaves one token
    chosen, top = token_logprobs(logits, torch.tensor([3]), [3])
    assert chosen == [0.0] and sorted(top[0].values()) == [-9999.0, -9999.0, 0.0]


def test_default_rows_skip_the_penalty_path():
    assert not any(p.penalized for p in [SamplingParams(), SamplingParams(temperature=0.3, top_k=5, logprobs=3)])
    assert all(p.penalized for p in ROWS[1:])
