import pytest
import torch
from floodway.engine.detokenizer import Detokenizer
from floodway.engine.sampler import draw, sample
from floodway.engine.sampling_params import SamplingParams


def test_greedy_topk1_and_tiny_top_p_pick_the_argmax():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=0), SamplingParams(top_k=1), SamplingParams(top_p=1e-6),
              SamplingParams(temperature=1e-4)]
    out = sample(logits, params, [None] * 4, torch.Generator().manual_seed(1))
    assert out.tokens == logits.argmax(-1).tolist()
    assert out.logprobs is None and out.top_logprobs is None


def test_seeded_rows_repeat_whatever_the_batch_and_logprobs_match():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    seeded = SamplingParams(temperature=1.0, seed=5, logprobs=0)

    def draw(batch_rows):
        gens = [torch.Generator().manual_seed(5) if i == 0 else None for i in range(batch_rows)]
        out = sample(logits[:batch_rows], [seeded] + [SamplingParams()] * (batch_rows - 1), gens,
                     torch.Generator().manual_seed(batch_rows))
        return out.tokens, out.logprobs

    (t1, lp1), (t3, _) = draw(1), draw(3)
    assert t1[0] == t3[0]
    assert lp1[0] == pytest.approx(torch.log_softmax(logits[0], -1)[t1[0]].item())


def test_top_k_restricts_the_choice():
    logits = torch.arange(10, dtype=torch.float32)[None].repeat(200, 1)
    out = sample(logits, [SamplingParams(top_k=2)] * 200, [None] * 200, torch.Generator().manual_seed(0))
    assert set(out.tokens) == {8, 9}


def test_draw_follows_the_weights_and_never_picks_a_zero_one():
    """Inverse-CDF draws: frequencies within 1% of the normalised weights over 200,000 rows; a zero weight (between,
    before and after positive ones) is never drawn, even at u = 0 and u just below 1."""
    weights = torch.tensor([0.0, 0.2, 0.0, 1.2, 0.6, 0.0])
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    u[:2] = torch.tensor([0.0, 1.0 - 2.0**-24])
    counts = torch.bincount(draw(weights.expand(len(u), -1), u), minlength=len(weights)) / len(u)
    assert counts[[0, 2, 5]].sum() == 0
    torch.testing.assert_close(counts, weights / weights.sum(), atol=0.01, rtol=0)


def test_detokenizer_holds_back_a_possible_stop_string(engine):
    tok = engine.tokenizer
    ids = tok("hello world, this is the end of it").input_ids
    d = Detokenizer(tok, ["the end"])
    streamed, stop = "", None
    for t in ids:
        stop = d.add(t)
        finished = stop is not None
        streamed += d.take_new(finished)
        assert "the end" not in streamed
        if finished:
            break
    assert stop == "the end"
    assert streamed == d.text == "hello world, this is "
