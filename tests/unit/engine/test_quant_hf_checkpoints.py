"""Quantized Hugging Face checkpoints served by the engine: seeded Llama and Qwen2 models written as AWQ, GPTQ,
compressed-tensors and FP8 checkpoints (tests/quant_checkpoints.py: compressed-tensors by its own library, the
others by packers pinned to GPTQModel's bytes in test_quant_hf_formats.py), detected from config.json, served on
our kernels with logits close to transformers' fp32 on the weights each checkpoint means (for compressed-tensors,
transformers' own decompression of it), and within what the bits allow of the float model. FP8 has no CPU kernel:
its checkpoints decode to the weights they mean and are refused on CPU (the Triton kernel serves them:
test_quant_kernel.py). Broken checkpoints and settings that cannot be served are refused with errors that name the
format and what to do."""

import json
import math
import pathlib
import shutil

import pytest
import torch
from floodway.engine.config import EngineConfig
from floodway.engine.model_runner import ModelRunner
from floodway.engine.models.builtin import write_random_model
from floodway.engine.quant import formats, linear
from floodway.engine.quant.hf_weights import HFQuantWeights
from floodway.engine.step_inputs import SeqInput

from tests import quant_checkpoints as make

# name -> (architecture, writer, the kernel name's format and group, max relative logit error against the float
# model). The loss bounds follow the bits: int4 steps of range/15 per group (measured 0.30-0.32 on these random
# models), int8 range/255 (0.02).
CASES = {
    "awq": ("llama", lambda src, out: make.write_gptq_or_awq(src, out, "awq"), "AWQ int4, group 128", 0.5),
    "gptq act-order": ("llama", lambda src, out: make.write_gptq_or_awq(src, out, "gptq", act_order=True),
                       "GPTQ int4, group 128", 0.5),
    "gptq int8 per-channel v2, head": ("qwen2", lambda src, out: make.write_gptq_or_awq(
        src, out, "gptq", bits=8, group=-1, sym=True, v1=False, head=True), "GPTQ int8, group 256", 0.06),
    "compressed-tensors W4A16 asym": ("llama", lambda src, out: make.write_compressed(src, out, "W4A16_ASYM"),
                                      "compressed-tensors W4A16, group 128", 0.5),
    "compressed-tensors W8A16 channel": ("qwen2", lambda src, out: make.write_compressed(
        src, out, "W8A16", strategy="channel", group_size=None), "compressed-tensors W8A16, group 256", 0.06),
}
FP8 = {"compressed-tensors FP8": ("llama", lambda src, out: make.write_compressed(src, out, "FP8_DYNAMIC")),
       "compressed-tensors FP8 per-tensor": ("llama", lambda src, out: make.write_compressed(src, out, "FP8")),
       "fp8 per-tensor": ("qwen2", lambda src, out: make.write_fp8(src, out, per_channel=False)),
       "fp8 per-channel": ("llama", lambda src, out: make.write_fp8(src, out, per_channel=True))}
IDS = list(range(5, 45))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-quant")
    return {arch: write_random_model(root / arch, arch, seed=5, intermediate_size=512) for arch in ("llama", "qwen2")}


@pytest.fixture(scope="module")
def checkpoints(models, tmp_path_factory):
    """name -> (folder, {linear weight: the float weight it means}), made on first use."""
    made = {}

    def get(name: str):
        if name not in made:
            arch, writer = {**CASES, **FP8}[name][:2]
            out = tmp_path_factory.mktemp("ckpt") / "model"
            written = writer(models[arch], out)
            made[name] = written if isinstance(written, tuple) else (written, make.compressed_meant(written))
        return made[name]
    return get


def _engine_logits(runner: ModelRunner) -> torch.Tensor:
    table = list(range(math.ceil(len(IDS) / runner.shape.block_size)))
    out = runner.execute([SeqInput(IDS, 0, table, True, num_prompt_logits=len(IDS) - 1)])
    return torch.cat([out[1:], out[:1]])


def _transformers_logits(folder: str, linears: dict | None = None) -> torch.Tensor:
    """fp32 logits of a float folder, with `linears` replacing its weights of those names."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if linears and name in linears:
                p.copy_(linears[name])
        return model(torch.tensor([IDS])).logits[0]


@pytest.mark.parametrize("name", list(CASES))
def test_checkpoint_is_served_as_it_means(models, checkpoints, name):
    arch, _, kernel, loss_bound = CASES[name]
    folder, meant = checkpoints(name)
    method = formats.declared_method(json.loads((pathlib.Path(folder) / "config.json").read_text()))
    runner = ModelRunner(EngineConfig(model=folder, num_kv_blocks=8))
    assert runner.weights.method == method and runner.dtype == torch.bfloat16
    assert all(kernel in runner.linear_kernels[s] for s in ("qkv", "o_proj", "gate_up")), runner.linear_kernels
    assert ("GPTQ" in runner.linear_kernels["lm_head"]) == ("lm_head.weight" in meant)  # GPTQ's lm_head option
    got = _engine_logits(runner)
    if method == "compressed-tensors":  # the library saved norms and embeddings in bf16: its own model is the oracle
        from transformers import AutoModelForCausalLM, CompressedTensorsConfig

        ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                   quantization_config=CompressedTensorsConfig(dequantize=True))
        with torch.no_grad():
            want = ref(torch.tensor([IDS])).logits[0]
    else:
        want = _transformers_logits(models[arch], meant)
    scale = want.abs().max().item()
    # bf16 activations (and the CPU kernel's bf16 scales) against fp32: a few bf16 ulps through 3-4 layers
    assert (got - want).abs().max().item() / scale < 0.03
    assert (_transformers_logits(models[arch]) - got).abs().max().item() / scale < loss_bound


def test_quantization_can_be_named_or_left_auto(checkpoints):
    folder, _ = checkpoints("gptq act-order")
    assert ModelRunner(EngineConfig(model=folder, quantization="gptq", num_kv_blocks=8)).weights.method == "gptq"
    with pytest.raises(ValueError, match="is a GPTQ int4 checkpoint: serve it with --quantization gptq"):
        ModelRunner(EngineConfig(model=folder, quantization="int4"))


@pytest.mark.parametrize("name", list(FP8))
def test_fp8_checkpoints_decode_to_their_weights_and_are_refused_on_cpu(checkpoints, name):
    folder, meant = checkpoints(name)
    config = json.loads((pathlib.Path(folder) / "config.json").read_text())
    source = HFQuantWeights(folder, formats.scheme(config, folder))
    # transformers decompresses compressed-tensors in the checkpoint's bf16; our float32 rounds to its numbers
    rounded = torch.bfloat16 if config["quantization_config"]["quant_method"] == "compressed-tensors" else torch.float32
    for weight, want in meant.items():
        got = source.get(weight, tuple(want.shape))
        assert got.e4m3 and torch.equal(got.dequantize().to(rounded).float(), want), weight
    with pytest.raises(linear.Unsupported, match="FP8( E4M3)? weights have no CPU kernel here.*--quantization int8"):
        ModelRunner(EngineConfig(model=folder))


def test_fp8_of_a_float_checkpoint_is_refused_on_cpu(models):
    with pytest.raises(linear.Unsupported, match="fp8 weights have no CPU kernel here.*--quantization int8"):
        ModelRunner(EngineConfig(model=models["llama"], quantization="fp8"))


def _copy(folder: str, to: pathlib.Path) -> pathlib.Path:
    shutil.copytree(folder, to)
    return to


def _set_config(folder: pathlib.Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"].update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_corrupt_and_truncated_checkpoints_are_refused(checkpoints, tmp_path):
    folder, _ = checkpoints("awq")
    cut = _copy(folder, tmp_path / "cut")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) - 5000])
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        ModelRunner(EngineConfig(model=str(cut)))
    missing = _copy(folder, tmp_path / "missing")
    from safetensors.torch import load_file, save_file

    state = load_file(str(missing / "model.safetensors"))
    del state["model.layers.1.mlp.down_proj.qzeros"]
    save_file(state, str(missing / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks tensor model.layers.1.mlp.down_proj.qzeros"):
        ModelRunner(EngineConfig(model=str(missing)))


def test_a_wrong_group_size_is_refused(checkpoints, tmp_path):
    folder = _copy(checkpoints("gptq act-order")[0], tmp_path / "g64")
    _set_config(folder, group_size=64)
    with pytest.raises(ValueError, match=r"qzeros has shape \[2, 32\], expected \[4, 32\].*group_size"):
        ModelRunner(EngineConfig(model=str(folder)))


def test_unsupported_bits_and_settings_are_refused(checkpoints, models, tmp_path):
    folder = _copy(checkpoints("gptq act-order")[0], tmp_path / "b3")
    _set_config(folder, bits=3)
    with pytest.raises(linear.Unsupported, match="GPTQ with 3-bit codes has no kernel here.*vLLM"):
        ModelRunner(EngineConfig(model=str(folder)))
    awq, _ = checkpoints("awq")
    with pytest.raises(linear.Unsupported, match="AWQ int4 weights on CPU compute in bfloat16.*vLLM"):
        ModelRunner(EngineConfig(model=awq, dtype="float32"))
    with pytest.raises(linear.Unsupported, match="serves only our own decoder.*serve it with vLLM"):
        ModelRunner(EngineConfig(model=awq, model_impl="transformers"))
    with pytest.raises(ValueError, match="--quantization awq serves awq checkpoints.*has none.*int4, int8 or fp8"):
        ModelRunner(EngineConfig(model=models["llama"], quantization="awq"))
