"""GGUF files served as they ship: seeded Llama and Qwen2 models written by the `gguf` package (its GGUFWriter and
its own quantizers, q/k rows reordered as llama.cpp's converter does: engine/bench/gguf_export.py), K-quant files
made from their F32 form by llama.cpp's llama-quantize (e2e/llamacpp/build.sh builds it), read by our loader tensor
for tensor equal to what transformers' GGUF loader dequantizes, and served by the engine with logits close to
transformers' on those dequantized weights. Bad files and settings are refused with errors that say what to do."""

import math

import pytest
import torch
from floodway.engine.bench import llamacpp
from floodway.engine.bench.gguf_export import write_gguf
from floodway.engine.config import EngineConfig
from floodway.engine.model_runner import ModelRunner
from floodway.engine.models.builtin import write_random_model
from floodway.engine.quant import linear, weights
from floodway.engine.quant.gguf_weights import GGUFWeights
from floodway.engine.step_inputs import SeqInput

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{(arch, kind): (gguf path, tokenizer folder)}, made on first use."""
    made = {}

    def get(arch: str, kind: str):
        if (arch, kind) not in made:
            root = tmp_path_factory.mktemp(f"{arch}-{kind}")
            folder = write_random_model(root / "hf", arch, seed=5, intermediate_size=512)
            if kind in K_TYPES:
                write_gguf(folder, root / "model.F32.gguf", "F32")
                llamacpp.llama_quantize(str(root / "model.F32.gguf"), root / f"model.{kind}.gguf", kind)
            else:
                write_gguf(folder, root / f"model.{kind}.gguf", kind)
            made[arch, kind] = (str(root / f"model.{kind}.gguf"), folder)
        return made[arch, kind]
    return get


CASES = [("llama", "Q4_1"), ("qwen2", "Q8_0"), ("llama", "Q4_0"), ("qwen2", "Q5_0"), ("llama", "Q5_1"),
         ("llama", "Q4_K_M"), ("qwen2", "Q5_K_M"), ("llama", "Q6_K"), ("qwen2", "Q3_K_M"), ("llama", "Q2_K")]
# llama-quantize's file types -> the tensor types it writes in them at least (every matrix here is in whole
# 256-element super-blocks; Q2_K's mix also gives some of qwen2's Q4_K)
K_TYPES = {"Q4_K_M": {"Q4_K", "Q6_K"}, "Q5_K_M": {"Q5_K", "Q6_K"}, "Q6_K": {"Q6_K"},
           "Q3_K_M": {"Q3_K", "Q4_K", "Q5_K", "Q6_K"}, "Q2_K": {"Q2_K", "Q3_K", "Q6_K"}}


@pytest.mark.parametrize("arch,kind", CASES)
def test_loader_tensors_equal_transformers_gguf_dequantization(files, arch, kind):
    from transformers import AutoModelForCausalLM

    path, _ = files(arch, kind)
    ref = AutoModelForCausalLM.from_pretrained(str(path).rsplit("/", 1)[0], gguf_file=path.rsplit("/", 1)[1],
                                               dtype=torch.float32)
    ours = GGUFWeights(path)
    checked = 0
    for name, t in ref.state_dict().items():
        if not ours.has(name):
            continue
        got = ours.get(name, tuple(t.shape))
        got = got if isinstance(got, torch.Tensor) else got.dequantize()
        torch.testing.assert_close(got, t, rtol=0, atol=0, msg=name)
        checked += 1
    assert checked >= 7 * ref.config.num_hidden_layers
    if kind in K_TYPES:
        types = {t.tensor_type.name for t in ours.reader.tensors if len(t.shape) == 2}
        assert K_TYPES[kind] <= types <= K_TYPES[kind] | {"Q4_K"}, types


def _all_logits(runner, ids):
    """Logits of every position of one prompt run as a single prefill."""
    table = list(range(math.ceil(len(ids) / runner.shape.block_size)))
    out = runner.execute([SeqInput(ids, 0, table, True, num_prompt_logits=len(ids) - 1)])
    return torch.cat([out[1:], out[:1]])


@pytest.mark.parametrize("arch,kind", CASES)
def test_engine_serves_the_file_as_transformers_computes_it(files, arch, kind):
    from transformers import AutoModelForCausalLM

    path, tokenizer = files(arch, kind)
    runner = ModelRunner(EngineConfig(model=path, tokenizer=tokenizer, num_kv_blocks=8))
    assert runner.weights.method == "gguf" and runner.dtype == torch.bfloat16
    for kernel in (runner.linear_kernels[s] for s in ("qkv", "o_proj", "gate_up", "down_proj")):
        assert any(k in kernel for k in K_TYPES.get(kind, {kind})), kernel
    if kind == "Q4_K_M":  # llama-quantize gives some layers' v_proj Q6_K: q/k/v served as two linears side by side
        assert " + " in runner.linear_kernels["qkv"]
    ids = list(range(5, 45))
    got = _all_logits(runner, ids)
    ref = AutoModelForCausalLM.from_pretrained(path.rsplit("/", 1)[0], gguf_file=path.rsplit("/", 1)[1],
                                               dtype=torch.float32)
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0]
    # bf16 activations against fp32: a few bf16 ulps (2^-8) of the logits' scale through 3-4 layers
    err = (got - want).abs().max().item() / want.abs().max().item()
    assert err < 0.03, err


def test_truncated_and_foreign_files_are_refused(files, tmp_path):
    path, tokenizer = files("llama", "Q4_1")
    data = open(path, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ValueError, match=r"cut.gguf (is not a readable GGUF file|.*truncated)"):
        ModelRunner(EngineConfig(model=str(cut), tokenizer=tokenizer, num_kv_blocks=8))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf is not a readable GGUF file"):
        ModelRunner(EngineConfig(model=str(junk), tokenizer=tokenizer, num_kv_blocks=8))


def test_unsupported_tensor_types_are_named(files, tmp_path):
    _, folder = files("llama", "Q4_1")
    path = tmp_path / "tq2.gguf"
    write_gguf(folder, path, "TQ2_0")  # ternary: no kernel here
    with pytest.raises(ValueError, match="is TQ2_0; GGUF files load here with Q8_0, Q4_0, Q4_1, Q5_0"):
        ModelRunner(EngineConfig(model=str(path), tokenizer=folder, num_kv_blocks=8))


def test_settings_that_cannot_be_served_are_refused(files):
    path, tokenizer = files("llama", "Q4_1")
    with pytest.raises(ValueError, match="is a GGUF file: serve it with --quantization gguf"):
        ModelRunner(EngineConfig(model=path, tokenizer=tokenizer, quantization="int4"))
    with pytest.raises(linear.Unsupported, match="GGUF weights on CPU compute in bfloat16"):
        ModelRunner(EngineConfig(model=path, tokenizer=tokenizer, dtype="float32"))
    with pytest.raises(linear.Unsupported, match="serves only our own decoder.*--quantization none"):
        ModelRunner(EngineConfig(model=tokenizer, quantization="int4", model_impl="transformers"))
    with pytest.raises(ValueError, match="--quantization gguf needs a .gguf model file"):
        ModelRunner(EngineConfig(model=tokenizer, quantization="gguf"))
    with pytest.raises(ValueError, match="quantization must be one of"):
        EngineConfig(quantization="awq4").validate()


def test_rtn_int4_serves_a_float_checkpoint(files):
    """The engine's int4 logits are transformers' fp32 ones on the round-to-nearest weights, and not the float
    model's (the layers' linears quantized, the head kept float)."""
    from transformers import AutoModelForCausalLM

    _, folder = files("llama", "Q4_1")
    runner = ModelRunner(EngineConfig(model=folder, quantization="int4", num_kv_blocks=8))
    assert runner.dtype == torch.bfloat16 and "int4, group 32" in runner.linear_kernels["qkv"]
    assert "int4" not in runner.linear_kernels["lm_head"]
    # the int4 kernel's row block, which speculation prices drafts by: torch's multiplies rows four at a time
    assert runner.row_tile == (1 if linear.CPU_INT4 == "ours" else 4)
    ids = list(range(5, 30))
    got = _all_logits(runner, ids)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        want_float = ref(torch.tensor([ids])).logits[0]
        for module in ref.model.layers.modules():
            if isinstance(module, torch.nn.Linear):
                # quantized as loaded: in the served dtype
                module.weight.copy_(weights.rtn(module.weight.to(torch.bfloat16), 4).dequantize())
        want = ref(torch.tensor([ids])).logits[0]
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() / scale < 0.03
    assert (want_float - want).abs().max().item() / scale > 0.05  # int4 on random weights moves logits visibly


def test_a_declared_quantization_config_is_refused_not_loaded_as_float(tmp_path, files):
    import json
    import shutil

    _, folder = files("llama", "Q4_1")
    copy = tmp_path / "bnb"
    shutil.copytree(folder, copy)
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "bitsandbytes"}}))
    with pytest.raises(linear.Unsupported, match="is a bitsandbytes checkpoint"):
        ModelRunner(EngineConfig(model=str(copy)))
