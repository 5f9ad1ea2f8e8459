"""bf16 and float32 linear layers with oneDNN-prepacked weights on CPU: what they replace, and the same logits as the
plain model's (to the dtype's rounding), for one token and for a batch."""

import pytest
import torch
from floodway.engine import packed_linear

needs_onednn_bf16 = pytest.mark.skipif(
    not packed_linear.supported(torch.device("cpu"), torch.bfloat16),
    reason="needs a CPU and torch build with oneDNN bf16 kernels (AVX512-BF16 or AMX)")
needs_onednn = pytest.mark.skipif(not packed_linear.supported(torch.device("cpu"), torch.float32),
                                  reason="needs an x86 CPU and a torch build with oneDNN")
# dtype -> (atol, rtol) of the logits against the plain model's
TOLERANCE = {torch.bfloat16: (0.1, 0.05), torch.float32: (1e-4, 1e-4)}


def test_only_bf16_and_float32_on_cpu():
    assert not packed_linear.supported(torch.device("cpu"), torch.float16)
    assert not packed_linear.supported(torch.device("cuda"), torch.bfloat16)
    assert not packed_linear.supported(torch.device("cuda"), torch.float32)


@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, marks=needs_onednn_bf16),
                                   pytest.param(torch.float32, marks=needs_onednn)])
def test_packed_model_gives_the_plain_models_logits(tiny_model_path, dtype):
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=dtype).eval()
    packed = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=dtype).eval()
    linears = sum(type(m) is torch.nn.Linear for m in packed.modules())
    assert packed_linear.pack(packed) == linears > 0
    assert not any(type(m) is torch.nn.Linear for m in packed.modules())
    assert (packed.lm_head.in_features, packed.lm_head.out_features) == (plain.lm_head.in_features,
                                                                         plain.lm_head.out_features)
    ids = torch.randint(4, 4000, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for x in (ids[:1, :1], ids):  # one token (a batch-1 decode), and a batch of sequences
            a, b = plain(x).logits.float(), packed(x).logits.float()
            atol, rtol = TOLERANCE[dtype]
            torch.testing.assert_close(b, a, atol=atol, rtol=rtol)
            assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


@needs_onednn_bf16
def test_prepack_bench_prints_both_side_by_side(tiny_model_path, capsys):
    from floodway.engine.bench.prepack import main

    main(model=tiny_model_path, batches="1,3", tokens=3, rounds=1)
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |")
            or line.startswith("| 3 |")]
    assert len(rows) == 2 and all(float(r[1]) > 0 and float(r[2]) > 0 and r[3].endswith("x |") for r in rows)
