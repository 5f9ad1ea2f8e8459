"""SmolLM2 from GGUF files against the float32 model (engine/bench/quant_quality.py measures the same rows): each
format's loss on a held text stays within what its bits allow, and a loader error (wrong group size, swapped
scales, wrong zero point) breaks those bounds.

The float32 reference holds the shipped Q4_1 weights dequantized exactly, so Q4_1 differs from it by bf16 compute
only, Q8_0 re-rounds them to 8 bits (steps of absmax/127 per 32 weights) and Q4_0 to 4 bits (absmax/8, no offset;
the head kept at Q8_0, as llama-quantize keeps it above 4 bits). Measured: bf16 compute alone 0.0008 nats, Q4_1
0.0010, Q8_0 0.0021, Q4_0 0.28 (perplexity x1.19: a 135M model re-rounded to 4 bits). A 4-bit step is 16x an 8-bit
one, ~256x the squared error, and 256 x Q8_0's weight part (0.0013) predicts Q4_0's 0.3: the bounds follow that
ladder with headroom. Perplexity bounds are one-sided (a loss raises it) and no tighter than 2% above 1: over the
held text's 155 predictions, bf16 rounding alone moves it about 0.5% (Q8_0's went from x0.9932 to x0.9868 when the
int4 kernel's summation order changed, its KL 0.0021 both times). An injected loader error must break the shipped
Q4_1's bound.

K-quant files are llama-quantize's own, made from the F32 form of those weights: their matrices in rows of 576 are
not whole 256-element super-blocks, so it writes them as Q5_0 (Q4_K_M), Q5_1 (Q5_K_M) or Q8_0 (Q6_K), and only
down_proj as Q4_K, Q5_K or Q6_K. Re-rounding weights that sit on a 4-bit grid to a 5-bit one costs a relative squared
error of 2e-3 (the K types 3-4e-4, Q8_0 3e-5: docs/benchmarks/2026-12-06-k-quants.md), so the 5-bit files sit
between Q8_0 and Q4_0. Measured: Q6_K 0.0073 nats (perplexity x1.013), Q4_K_M 0.049
(x1.026), Q5_K_M 0.065 (x1.14; its Q5_1 re-rounding errs a little more than Q5_0's here).
"""

import pytest
import torch
from floodway.engine.bench import llamacpp
from floodway.engine.bench import quant_quality as quality
from floodway.engine.models.smollm2 import NAME
from floodway.engine.quant import gguf_weights, weights

CHATS = quality.CHATS[:1]  # "What is the capital of France?"
# format -> (max mean KL in nats, max ppl / fp32 - 1)
BOUNDS = {"Q4_1": (0.005, 0.02), "Q8_0": (0.01, 0.02), "Q4_0": (0.5, 0.3), "Q6_K": (0.02, 0.05),
          "Q4_K_M": (0.15, 0.3), "Q5_K_M": (0.15, 0.3)}


def _settings(kind: str) -> dict:
    if kind == "Q4_1":
        return dict(model=NAME, quantization="gguf")
    return dict(model=llamacpp.smollm2_gguf(kind), tokenizer=NAME)


@pytest.fixture(scope="module")
def reference():
    return quality.measure(dict(model=NAME, quantization="none", dtype="float32"), CHATS, max_tokens=12)


@pytest.mark.parametrize("kind", list(BOUNDS))
def test_format_loss_stays_within_its_bits(reference, kind, capsys):
    got = quality.measure(_settings(kind), CHATS, max_tokens=12)
    c = quality.compare(reference, got)
    ppl_ratio = c["ppl"] / quality.perplexity(reference["logp"], reference["ids"])
    with capsys.disabled():
        print(f"\n{kind}: mean KL {c['kl']:.5f} nats, perplexity x{ppl_ratio:.4f}, answer {got['texts'][0]!r}")
    kl_bound, ppl_bound = BOUNDS[kind]
    assert c["kl"] < kl_bound and ppl_ratio - 1 < ppl_bound
    if kind == "Q4_1":  # the default's demo answer (bf16 compute alone moves other formats' greedy paths)
        assert "Paris" in got["texts"][0]


def _broken(how: str):
    real = gguf_weights.decode

    def decode(blocks, kind):
        w = real(blocks, kind)
        s, m, group = w.scales.clone(), w.mins.clone(), w.group
        if how == "group":  # blocks of 32 read as groups of 64
            s, m, group = s[:, ::2], m[:, ::2], 64
        elif how == "swapped scales":
            s[:, 0::2], s[:, 1::2] = w.scales[:, 1::2], w.scales[:, 0::2]
        else:  # the zero point (Q4_1's m, Q8_0's -128 d) taken as 0
            m = torch.zeros_like(m)
        return weights.QuantWeight(w.codes, s, m, w.bits, group, w.name)
    return decode


@pytest.mark.parametrize("how", ["group", "swapped scales", "zero point"])
def test_injected_loader_errors_break_the_bounds(reference, how, monkeypatch):
    monkeypatch.setattr(gguf_weights, "decode", _broken(how))
    got = quality.measure(_settings("Q4_1"), chats=[])
    assert quality.mean_kl(reference["logp"], got["logp"]) > BOUNDS["Q4_1"][0] * 10
