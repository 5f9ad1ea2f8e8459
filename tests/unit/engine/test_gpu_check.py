"""The GPU check's pure parts: where two greedy runs part, when a divergence counts as a failure, what a decode
step reads and a prefill multiplies, and the README table's ratios against the bounds."""

import pytest


def test_first_divergence():
    from floodway.engine.bench.gpu_check_parity import first_divergence

    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([7, 2], [1, 2]) == 0
    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3


def test_judge_allows_rounding_but_not_a_clear_preference():
    import torch
    from floodway.engine.bench.gpu_check_parity import TOLERANCE, ParityRow, judge

    ref = torch.tensor([1.0, 0.98, -2.0, 0.5])
    run = ref + torch.tensor([0.0, 0.01, -0.01, 0.0])  # the run dtype's logits: off by at most 0.01
    margin, tol = judge(ref, run, ref_token=0, our_token=1)  # a near tie: within rounding
    assert margin == pytest.approx(0.02) and tol == pytest.approx(TOLERANCE * 0.01)
    assert ParityRow(5, 3, 3, 3, margin, tol).ok
    margin, tol = judge(ref, run, ref_token=0, our_token=3)  # the reference prefers its token by 0.5
    assert not ParityRow(5, 3, 3, 3, margin, tol).ok


@pytest.mark.parametrize("tied", [True, False])
def test_weight_bytes_and_matmul_params(tied):
    import torch
    from floodway.engine.bench.gpu_check_speed import matmul_params, weight_bytes
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, tie_word_embeddings=tied)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    layer = 3 * 32 * 64 + 2 * 32 * 32 + 2 * 32 * 16 + 2 * 32  # MLP, q/o, k/v (2 KV heads of 8), two norms
    assert matmul_params(model) == 2 * layer
    table = 100 * 32
    # a step reads the layers, the final norm and the output head; the input table only through the head it shares
    assert weight_bytes(model) == 2 * (2 * layer + 32 + table)


def test_readme_tables_ratios():
    from floodway.engine.bench.gpu_check import CPU, Bounds, ModelReport, readme_tables
    from floodway.engine.bench.gpu_check_parity import ParityRow

    rep = ModelReport("m", "shape", params=10**9, weight_bytes=2 * 10**9, matmul_params=10**9, kv="100 blocks (x)",
                      parity_rows=[ParityRow(9, 4, 6, 5, 0.01, 0.02), ParityRow(9, 8, 8, 8)],
                      ours={1: 1400.0, 4: 400.0}, static={1: 700.0, 4: 200.0}, continuous={1: 350.0, 4: "boom"},
                      prefill=1000.0)
    # 4 TB/s over 2 GB: 2000 tok/s at batch 1; 1 PFLOP/s over 2 GFLOP per token: 500,000 tok/s of prefill
    lines = readme_tables([rep], Bounds(bandwidth=4e12, peak=1e15), CPU, "title")
    text = "\n".join(lines)
    assert "| m (1.00B) | 2/2 pass; = float32 for median 6.5 tokens (transformers float32: 7) |" in text
    assert "1,400.0 tok/s of 2,000 (**70%**)" in text and "1,000 tok/s of 500,000 (**0%**)" in text
    assert "| m | 1 | 1,400.0 | 700.0 (**2.00x**) | 350.0 (**4.00x**) |" in text
    assert "| m | 4 | 400.0 | 200.0 (**2.00x**) | failed |" in text
