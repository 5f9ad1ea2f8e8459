"""The served precision sizes the weights: engine.quantization's formats with their group scales, checked
against the tensors each format stores (our engine's own quantized weight in its GPU kernel's layout for
int8/int4, the AWQ/GPTQ checkpoint layout for awq/gptq), and the FitsGPU check and `floodway plan` following
the setting."""

import json

import pytest
from floodway.operator.cli import app
from floodway.operator.planner.fit import spec_fit
from floodway.operator.planner.memory import QUANTIZATIONS, weight_format
from floodway.operator.planner.model_shape import shape_from_config
from floodway.operator.spec import InferenceServiceSpec
from typer.testing import CliRunner

from tests.unit.planner.conftest import LLAMA2_7B

PARAMS_7B = 6_738_415_616  # Llama-2-7B, as the planner counts it (test_cli)


@pytest.mark.parametrize("method,bits", [("int8", 8), ("int4", 4)])
def test_our_formats_size_as_the_engine_stores_them_on_gpu(method, bits):
    torch = pytest.importorskip("torch")
    quant_matmul = pytest.importorskip("floodway.engine.kernels.quant_matmul")
    from floodway.engine.quant.weights import rtn

    w = rtn(torch.randn(256, 512, generator=torch.Generator().manual_seed(0)), bits)
    stored = quant_matmul.pack_codes(w.codes, bits).nbytes + w.scales.nbytes + w.mins.nbytes  # TritonLinear's
    assert QUANTIZATIONS[method].bytes(256 * 512) == stored


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_awq_and_gptq_size_as_their_checkpoints_store_them(method):
    # A 4096 x 4096 projection at 4 bits, group 128: qweight int32 [4096, 4096 / 8], qzeros int32
    # [4096 / 128, 4096 / 8], scales fp16 [4096 / 128, 4096] (GPTQ's g_idx, 4 bytes per input row, left out).
    n = k = 4096
    stored = k * n // 8 * 4 + (k // 128) * (n // 8) * 4 + (k // 128) * n * 2
    assert QUANTIZATIONS[method].bytes(n * k) == stored


def test_bytes_per_parameter_of_each_setting():
    shape = shape_from_config(LLAMA2_7B, "llama-2-7b", "test", PARAMS_7B)
    per_param = {q: weight_format(shape, "bfloat16", q).bytes(PARAMS_7B) / PARAMS_7B
                 for q in ("none", "fp8", "int8", "int4", "awq", "gptq")}
    assert per_param == pytest.approx({"none": 2, "fp8": 1, "int8": 1.25, "int4": 0.75, "awq": 0.5 + 2.5 / 128,
                                       "gptq": 0.5 + 2.5 / 128}, rel=1e-9)


def test_auto_and_gguf_take_the_checkpoints_own_bits():
    quantized = shape_from_config({**LLAMA2_7B, "quantization_config": {"quant_method": "awq", "bits": 4}},
                                  "q", "test", PARAMS_7B)
    for q in (None, "auto", "gguf"):
        assert weight_format(quantized, "bfloat16", q).precision == "int4"
        assert weight_format(shape_from_config(LLAMA2_7B, "f", "test", PARAMS_7B), "bfloat16", q).precision == \
            "bfloat16"


def _spec(runtime: str, quantization: str) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({
        "model": "llama-2-7b", "engine": {"runtime": runtime, "quantization": quantization, "maxNumSeqs": 4},
        "resources": {"gpuType": "l4"},
        "modelShape": {"hiddenSize": 4096, "numLayers": 32, "numHeads": 32, "numKvHeads": 32, "vocabSize": 32000,
                       "intermediateSize": 11008, "maxPositionEmbeddings": 4096, "params": PARAMS_7B}})


def test_the_fits_gpu_check_sizes_the_weights_by_engine_quantization():
    # bfloat16 Llama-2-7B (12.55 GiB) on an L4 leaves room for fewer than 4 sequences of 2 GiB; int4 for more.
    assert spec_fit(_spec("floodway", "none"))[0] == "warning"
    level, message = spec_fit(_spec("floodway", "int4"))
    assert level == "ok" and "int4 (groups of 32) weights 4.71 GiB" in message, message
    level, message = spec_fit(_spec("vllm", "awq"))
    assert level == "ok" and "int4 (groups of 128) weights 3.26 GiB" in message, message
    assert "fp8 weights 6.28 GiB" in spec_fit(_spec("vllm", "fp8"))[1]


def test_floodway_plan_reports_the_served_format():
    result = CliRunner().invoke(app, ["plan", "--model", "floodway/tiny-llama", "--params", str(PARAMS_7B),
                                      "--quantization", "int4", "--json"])
    assert result.exit_code == 0, result.output
    weights = json.loads(result.output)["weights"]
    assert weights["precision"] == "int4 (groups of 32)" and weights["bytes"] == PARAMS_7B * 3 // 4
    assert weights["by_precision"]["int4"] == PARAMS_7B // 2  # the bare codes, the rule of thumb
