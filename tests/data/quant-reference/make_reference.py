"""Writes reference.safetensors: one linear from each of three checkpoints that GPTQModel (the GPTQ/AWQ reference
library; transformers loads both formats through it) quantized from a seeded model, and GPTQModel's own
dequantization of it. Not run by the tests (GPTQModel is heavy: a 22 s import, minutes per quantization on two
cores); rerun by hand after `pip install gptqmodel==7.7.0` in a scratch environment:

    GPTQMODEL_CPU_WORKERS=2 python tests/data/quant-reference/make_reference.py /tmp/quant-reference

The linear is layer 0's q_proj of floodway's seeded llama (write_random_model seed 5, intermediate_size 512),
its first 64 output rows; quantized with 8 random calibration sequences of 64 tokens (seed 0), bits 4, group 128:
  gptq_actorder: GPTQ v1 ("gptq" checkpoint_format), desc_act=True, sym=False: g_idx permutes the input;
  gptq_sym: GPTQ v1, desc_act=False, sym=True;
  awq: AWQ GEMM (zero_point False: GPTQModel's default, zeros stored as 8).
Tensors: <variant>.<checkpoint tensor> (sliced to the 64 rows) and <variant>.reference, [64, 256] in the scales'
dtype, as GPTQModel dequantizes it.
"""

import json
import pathlib
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROWS, PREFIX = 64, "model.layers.0.self_attn.q_proj"
VARIANTS = {"gptq_actorder": dict(bits=4, group_size=128, desc_act=True, sym=False),
            "gptq_sym": dict(bits=4, group_size=128, desc_act=False, sym=True),
            "awq": dict(bits=4, group_size=128, quant_method="awq", format="gemm")}


def quantize(src: str, out: pathlib.Path, options: dict) -> None:
    from gptqmodel import GPTQModel, QuantizeConfig

    torch.manual_seed(0)
    calib = [{"input_ids": torch.randint(5, 4000, (1, 64)), "attention_mask": torch.ones(1, 64, dtype=torch.long)}
             for _ in range(8)]
    model = GPTQModel.load(src, QuantizeConfig(**options), device="cpu")
    model.quantize(calib, batch_size=1)
    model.save(str(out))


def reference(folder: pathlib.Path, variant: str) -> dict:
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.quantization.awq.utils.packing_utils import dequantize_gemm
    from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module

    q = json.loads((folder / "config.json").read_text())["quantization_config"]
    f = safe_open(str(folder / "model.safetensors"), "pt")
    t = {k: f.get_tensor(f"{PREFIX}.{k}") for k in ("qweight", "qzeros", "scales", "g_idx")
         if f"{PREFIX}.{k}" in f.keys()}
    out_f, in_f = t["scales"].shape[1], t["g_idx"].shape[0] if "g_idx" in t else t["qweight"].shape[0]
    if variant == "awq":
        ref = dequantize_gemm(t["qweight"], t["qzeros"], t["scales"], 4, 128).T
        sliced = {"qweight": t["qweight"][:, :ROWS // 8], "qzeros": t["qzeros"][:, :ROWS // 8],
                  "scales": t["scales"][:, :ROWS]}
    else:
        m = TorchLinear(bits=4, group_size=128, sym=q["sym"], desc_act=q["desc_act"], in_features=in_f,
                        out_features=out_f, bias=False)
        for k, v in t.items():
            getattr(m, k).copy_(v)
        convert_gptq_v1_to_v2_format_module(m, 4, torch.int32)
        m.post_init()
        ref = m.dequantize_weight().T
        sliced = {"qweight": t["qweight"][:, :ROWS], "qzeros": t["qzeros"][:, :ROWS // 8],
                  "scales": t["scales"][:, :ROWS], "g_idx": t["g_idx"]}
    sliced["reference"] = ref[:ROWS]
    return {f"{variant}.{k}": v.contiguous() for k, v in sliced.items()}


def main(work: str) -> None:
    from floodway.engine.models.builtin import write_random_model

    root = pathlib.Path(work)
    src = write_random_model(root / "llama", "llama", seed=5, intermediate_size=512)
    tensors = {}
    for variant, options in VARIANTS.items():
        if not (root / variant / "config.json").exists():
            quantize(src, root / variant, options)
        tensors.update(reference(root / variant, variant))
    save_file(tensors, str(pathlib.Path(__file__).with_name("reference.safetensors")),
              metadata={"made_by": "gptqmodel 7.7.0 (make_reference.py)"})


if __name__ == "__main__":
    main(sys.argv[1])
