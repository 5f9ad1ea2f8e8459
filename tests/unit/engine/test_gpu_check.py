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


def test_feature_quant_table_ratios_and_rows_without_figures():
    from floodway.engine.bench.gpu_check_features import QuantRow, quant_table

    rows = [QuantRow("bfloat16", "F.linear bfloat16", {1: 100.0, 8: 400.0}),
            QuantRow("int4", "triton GEMM", {1: 150.0, 8: 300.0}),
            QuantRow("int8", error="failed (RuntimeError: boom)"),
            QuantRow("GGUF Q4_1", skipped="not measured: no gguf")]
    text = "\n".join(quant_table(rows, (1, 8), "bfloat16"))
    assert "| weights | q/k/v kernel | concurrency 1 tok/s | concurrency 8 tok/s |" in text
    assert "| bfloat16 | F.linear bfloat16 | 100.0 | 400.0 |" in text
    assert "| int4 | triton GEMM | 150.0 (**1.50x** bfloat16) | 300.0 (**0.75x** bfloat16) |" in text
    assert "| int8 | - | - | - |" in text and "| GGUF Q4_1 | - | - | - |" in text
    assert text.endswith("int8: failed (RuntimeError: boom)\nGGUF Q4_1: not measured: no gguf")


def test_feature_rows_settings():
    """Both profiles' feature shapes quantize (int8/int4 and Q4_1 take groups of 32 along every linear's input);
    the KV pool holds every concurrent sequence at full length; quantized weights compute in bf16 on a CPU."""
    from floodway.engine.bench.gpu_check import CPU, GPU, SHAPES
    from floodway.engine.bench.gpu_check_features import MAX_MODEL_LEN, dtype_for, kv_blocks
    from floodway.engine.models.builtin import model_config

    assert GPU.concurrency == (1, 8, 32) and GPU.features == "llama-1b"
    for prof in (GPU, CPU):
        arch, overrides = SHAPES[prof.features]
        cfg = model_config(arch, **overrides)
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        inputs = (cfg["hidden_size"], cfg["intermediate_size"], head_dim * cfg["num_attention_heads"])
        assert all(n % 32 == 0 for n in inputs), (prof.features, inputs)
    assert kv_blocks((1, 8, 32), 16) * 16 >= 32 * MAX_MODEL_LEN
    assert (dtype_for("cpu", "float32"), dtype_for("cuda", "bfloat16"), dtype_for("cuda", "float16")) == \
        ("bfloat16", "bfloat16", "float16")


def test_feature_quantized_rows_serve_each_format(tmp_path):
    """The quantized section as the check runs it, on the CPU's feature shape, the GGUF row included (the dry run in
    tests/integration has no gguf, as a GPU machine may not): every format measured, each by its own kernel."""
    pytest.importorskip("gguf")
    import torch
    from floodway.engine.bench import gpu_check_features as features
    from floodway.engine.bench.gpu_check import SHAPES
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine
    from floodway.engine.models.builtin import write_random_model

    arch, overrides = SHAPES["tiny-llama-g32"]
    folder = write_random_model(tmp_path / "m", arch, seed=0, dtype="bfloat16", **overrides)
    settings = dict(model=folder, dtype="bfloat16", device="cpu", max_model_len=features.MAX_MODEL_LEN,
                    max_num_seqs=2, num_kv_blocks=features.kv_blocks((2,), 16), enable_prefix_caching=False)
    lines: list[str] = []
    rows = features.quantized(LLMEngine(EngineConfig(**settings)), settings, folder, tmp_path, (2,), 2,
                              lambda *a: lines.extend(a), torch.device("cpu"))
    assert [r.name for r in rows] == ["bfloat16", "int8", "int4", "GGUF Q4_1"]
    assert all(r.error is None and r.skipped is None and r.tps[2] > 0 for r in rows), lines
    assert all(f"({r.name.split()[-1]}, group 32" in r.kernel for r in rows[1:]), [r.kernel for r in rows]
