"""--compile-decode: decode-only CPU steps run our decoder's layers as one torch.compile graph (inductor's C++ code,
with attention and prepacked linears as opaque ops); its logits equal the eager step's, at batch 1 and batch 3,
while prefill steps stay eager. tiny-llama, fp32 (and bf16 prepacked where oneDNN has its kernels)."""

import shutil

import pytest
import torch
from floodway.engine import packed_linear
from floodway.engine.models import llama
from floodway.engine.step_inputs import SeqInput

pytestmark = [pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="inductor's CPU code needs a C++ compiler")]

DTYPES = ["float32"] + (["bfloat16"] if packed_linear.supported(torch.device("cpu"), torch.bfloat16) else [])


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_decode_steps_give_the_eager_logits(tiny_model_path, dtype):
    from floodway.engine.config import EngineConfig
    from floodway.engine.model_runner import ModelRunner

    cfg = dict(model=tiny_model_path, dtype=dtype, max_model_len=64, num_kv_blocks=16, block_size=4)
    eager, compiled = ModelRunner(EngineConfig(**cfg)), ModelRunner(EngineConfig(**cfg, compile_decode=True))
    assert eager.model.compiled_layers is None and compiled.model.compiled_layers is not None
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, 4000, (n,), generator=gen).tolist() for n in (5, 9, 3)]
    tables = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    prefill = [SeqInput(p, 0, t, True) for p, t in zip(prompts, tables, strict=True)]
    lens = [len(p) for p in prompts]
    steps = [prefill, [SeqInput([11], lens[0], tables[0], True)],  # batch 1 (the first sequence)
             [SeqInput([12 + i], lens[i] + (i == 0), tables[i], True) for i in range(3)]]  # batch 3
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == "float32" else dict(atol=0.1, rtol=0.05)
    for step in steps:
        llama._compiled_step.meta = None
        want, got = eager.execute(step), compiled.execute(step)
        ran_compiled = llama._compiled_step.meta is not None  # set only where the compiled graph runs the step
        assert ran_compiled == (step is not prefill)
        torch.testing.assert_close(got, want, **tol)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_compile_decode_with_transformers_modules_says_it_does_nothing(tiny_model_path, caplog):
    """--compile-decode compiles our decoder only: with --model-impl transformers the engine says so at startup
    instead of running eager in silence."""
    from floodway.engine.config import EngineConfig
    from floodway.engine.model_runner import ModelRunner

    cfg = EngineConfig(model=tiny_model_path, max_model_len=64, num_kv_blocks=16, block_size=4,
                       model_impl="transformers", compile_decode=True)
    with caplog.at_level("WARNING", logger="floodway.engine"):
        runner = ModelRunner(cfg)
    assert not isinstance(runner.model, llama.LlamaDecoder)
    assert "--compile-decode ignored" in caplog.text and "transformers' LlamaForCausalLM" in caplog.text
