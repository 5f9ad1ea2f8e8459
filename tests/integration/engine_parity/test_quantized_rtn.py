"""`--quantization int8|int4` (round-to-nearest in groups of 32 at load) on SmolLM2 against float32: the loss on a
held text stays within what the bits allow (engine/bench/quant_quality.py measures the same rows).

int8 rounds each weight to absmax/127 steps of its group (as Q8_0), int4 to (max - min)/15 steps (as Q4_1). The
reference's weights already lie on a Q4_1 grid of 32, which int4 mostly finds again (measured 0.0010 nats, as Q4_1
itself), so on this model int4 shows little beyond bf16 compute; the bounds are the bits' ladder of
test_quantized_gguf.py (8-bit near bf16 compute's 0.0008 nats, 4-bit up to Q4_0's measured 0.28 with headroom).
"""

import pytest
from floodway.engine.bench import quant_quality as quality
from floodway.engine.models.smollm2 import NAME

CHATS = quality.CHATS[:1]  # "What is the capital of France?"
BOUNDS = {"int8": (0.01, 0.02), "int4": (0.5, 0.3)}  # format -> (max mean KL in nats, max ppl / fp32 - 1)


@pytest.fixture(scope="module")
def reference():
    return quality.measure(dict(model=NAME, quantization="none", dtype="float32"), CHATS, max_tokens=12)


@pytest.mark.parametrize("method", list(BOUNDS))
def test_rtn_loss_stays_within_its_bits(reference, method, capsys):
    got = quality.measure(dict(model=NAME, quantization=method), CHATS, max_tokens=12)
    assert f"{method}, group 32" in got["kernels"]["gate_up"]
    c = quality.compare(reference, got)
    ppl_ratio = c["ppl"] / quality.perplexity(reference["logp"], reference["ids"])
    with capsys.disabled():
        print(f"\n{method}: mean KL {c['kl']:.5f} nats, perplexity x{ppl_ratio:.4f}, answer {got['texts'][0]!r}")
    kl_bound, ppl_bound = BOUNDS[method]
    assert c["kl"] < kl_bound and ppl_ratio - 1 < ppl_bound
