"""SmolLM2 as Hugging Face quantized checkpoints (AWQ, GPTQ, compressed-tensors W4A16 and W8A16) against the float32
model: each format's loss on the held text stays within what its bits allow (the same ladder as
test_quantized_gguf.py), and an AWQ checkpoint read with the wrong nibble order breaks that bound.

The checkpoints are made here from the float32 folder `--quantization none` serves: compressed-tensors' by its own
library, AWQ's and GPTQ's by the tests' packers (pinned to GPTQModel's bytes in tests/unit/engine). Groups are 64
columns: SmolLM2's hidden size (576) is no multiple of 128. Round-to-nearest stands in for AWQ's and GPTQ's
calibrated rounding (which needs their libraries and a calibration set), so these rows measure the format and our
loading of it, not those algorithms' accuracy: a calibrated checkpoint loses less. (Act-order, whose order comes
from calibration, is pinned to GPTQModel's own checkpoint in tests/unit/engine/test_quant_hf_formats.py; a random
order here measured 0.40 nats, perplexity x1.53.) The float32 weights lie on a Q4_1 grid of 32, so every 4-bit
row re-rounds them, as Q4_0 does (0.28 nats measured, perplexity x1.19), and 8-bit rows stay near bf16 compute's
0.0008 nats. Symmetric codes (GPTQ's and compressed-tensors' default) span 2 absmax where
AWQ's zero points span max - min, and a group of 64 has a larger absmax than one of 32: their steps are larger than
Q4_0's, so the 4-bit bounds sit above test_quantized_gguf.py's (measured: AWQ 0.26 nats, GPTQ 0.38, W4A16 0.34;
perplexity x1.15-1.36).
"""

import pytest
from floodway.engine.bench import quant_quality as quality
from floodway.engine.models import builtin
from floodway.engine.models.smollm2 import NAME
from floodway.engine.quant import hf_decode

from tests import quant_checkpoints as packers

CHATS = quality.CHATS[:1]  # "What is the capital of France?"
GROUP = 64
# format -> (max mean KL in nats, max ppl / fp32 - 1, the kernel's name for the qkv linear)
BOUNDS = {"awq": (0.6, 0.5, "AWQ int4, group 64"), "gptq": (0.6, 0.5, "GPTQ int4, group 64"),
          "w4a16": (0.6, 0.5, "W4A16, group 64"), "w8a16": (0.01, 0.02, "W8A16, group 64")}


def _write(fmt: str, out) -> str:
    src = builtin.resolve_model(NAME)
    if fmt in ("awq", "gptq"):  # each with its library's default: AWQ with zero points, GPTQ symmetric
        return packers.write_gptq_or_awq(src, out, fmt, group=GROUP, sym=fmt == "gptq")[0]
    return packers.write_compressed(src, out, fmt.upper(), group_size=GROUP)  # W4A16, W8A16


@pytest.fixture(scope="module")
def reference():
    return quality.measure(dict(model=NAME, quantization="none", dtype="float32"), CHATS, max_tokens=12)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(fmt: str) -> str:
        if fmt not in made:
            made[fmt] = _write(fmt, tmp_path_factory.mktemp(fmt) / "ckpt")
        return made[fmt]
    return get


@pytest.mark.parametrize("fmt", list(BOUNDS))
def test_format_loss_stays_within_its_bits(reference, checkpoints, fmt, capsys):
    got = quality.measure(dict(model=checkpoints(fmt), tokenizer=NAME), CHATS, max_tokens=12)
    kl_bound, ppl_bound, kernel = BOUNDS[fmt]
    assert kernel in got["kernels"]["qkv"]
    c = quality.compare(reference, got)
    ppl_ratio = c["ppl"] / quality.perplexity(reference["logp"], reference["ids"])
    with capsys.disabled():
        print(f"\n{fmt}: mean KL {c['kl']:.5f} nats, perplexity x{ppl_ratio:.4f}, agreement {c['agreement']:.3f}, "
              f"answer {got['texts'][0]!r}")
    assert c["kl"] < kl_bound and ppl_ratio - 1 < ppl_bound


def test_awq_read_in_gptqs_nibble_order_breaks_the_bound(reference, checkpoints, monkeypatch):
    monkeypatch.setattr(hf_decode, "_AWQ_UNDO", list(range(8)))
    got = quality.measure(dict(model=checkpoints("awq"), tokenizer=NAME), chats=[])
    assert quality.mean_kl(reference["logp"], got["logp"]) > BOUNDS["awq"][0] * 2
