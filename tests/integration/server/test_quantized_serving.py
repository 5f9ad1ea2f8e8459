"""The built-in SmolLM2 served over HTTP from its shipped Q4_1 GGUF by default: /debug/engine and the startup log
name each linear's kernel, and the model still answers."""

import httpx
import pytest
from floodway.engine.kernels import cpu_quant_matmul
from floodway.engine.models.smollm2 import NAME
from floodway.engine.quant import linear

KERNEL = {"ours": cpu_quant_matmul.name,
          "torch": lambda bits: "aten._weight_int4pack_mm_for_cpu"}[linear.CPU_INT4]


@pytest.fixture(scope="module")
def smol_q4(start_engine):
    return start_engine("--model", NAME, "--max-model-len", "256", "--max-num-seqs", "4")


def test_default_weights_are_the_shipped_q4_1_and_debug_names_the_kernels(smol_q4, engine_debug):
    d = engine_debug(smol_q4.url)
    assert d["weights"] == "gguf"
    kernels = d["linear_kernels"]
    for slot in ("qkv", "o_proj", "gate_up", "down_proj"):
        assert kernels[slot] == f"{KERNEL(4)} (Q4_1, group 32)", kernels
    assert kernels["lm_head"].startswith(f"{KERNEL(8)} (Q8_0, group 32")  # the tied Q8_0 table
    assert f"weights: gguf; linear kernels: qkv: {KERNEL(4)} (Q4_1, group 32)" in smol_q4.log_tail(10**6)


def test_q4_1_answers_the_demo_prompt(smol_q4):
    r = httpx.post(smol_q4.url + "/v1/chat/completions", timeout=120, json={
        "model": NAME, "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 16, "temperature": 0})
    assert r.status_code == 200, r.text
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
