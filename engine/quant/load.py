"""Which weights a model is served with (`--quantization`), and filling our decoder's linears with them.

auto: the checkpoint's own (a .gguf file's types; the built-in SmolLM2's shipped Q4_1 GGUF), float otherwise; none:
float weights (SmolLM2: its float32 folder); gguf: the GGUF file as it ships; int8/int4: round-to-nearest
group-wise at load of a float checkpoint. Quantized weights live only in our decoder's linears (merged q/k/v,
o_proj, merged gate/up, down_proj; the head too where the GGUF file quantizes it), so they need it: transformers'
modules are refused rather than served in float.
"""

import json
import logging
import pathlib
from dataclasses import dataclass

import torch
from floodway.engine.models import smollm2
from floodway.engine.quant import linear, weights
from torch import nn

log = logging.getLogger("floodway.engine")

METHODS = ("auto", "none", "gguf", "int8", "int4")
# Our decoder's linears: attribute -> the Hugging Face projections it stacks.
SLOTS = {"qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "o_proj": ("self_attn.o_proj",),
         "gate_up": ("mlp.gate_proj", "mlp.up_proj"), "down_proj": ("mlp.down_proj",)}


@dataclass(frozen=True)
class Plan:
    method: str  # none, gguf, int8 or int4
    gguf_file: str | None = None

    def dtype_name(self, dtype: str, device: torch.device) -> str:
        """auto means bfloat16 for quantized weights on CPU: the only dtype their kernels serve there."""
        return "bfloat16" if dtype == "auto" and self.method != "none" and device.type == "cpu" else dtype

    def check(self, device: torch.device, dtype: torch.dtype) -> None:
        """Refuses, before any weight is read, what no kernel on this device serves."""
        if self.method in ("int8", "int4"):
            linear.check(self.method, int(self.method[3:]), weights.RTN_GROUP, device, dtype)
        elif self.method == "gguf":
            linear.check("GGUF", 4, 32, device, dtype)


def plan(quantization: str, model: str, path: str) -> Plan:
    """The weights to serve, from the setting and the checkpoint (reads only a folder's config.json)."""
    if quantization not in METHODS:
        raise ValueError(f"quantization must be one of {', '.join(METHODS)}, got {quantization!r}")
    gguf_file = str(smollm2.gguf_path()[0]) if model == smollm2.NAME and quantization in ("auto", "gguf") \
        else path if path.endswith(".gguf") else None
    if gguf_file:
        if quantization not in ("auto", "gguf"):
            raise ValueError(f"{path} is a GGUF file: serve it with --quantization gguf (or auto); "
                             f"{quantization} applies to float checkpoints")
        return Plan("gguf", gguf_file)
    if quantization == "gguf":
        raise ValueError(f"--quantization gguf needs a .gguf model file, got {path}")
    config = pathlib.Path(path) / "config.json"
    declared = json.loads(config.read_text()).get("quantization_config") if config.is_file() else None
    if declared:
        raise linear.Unsupported(f"{path} is a {declared.get('quant_method', 'quantized')} checkpoint "
                                 f"(quantization_config), which this engine does not load yet: serve a float "
                                 f"checkpoint with --quantization none, int8 or int4, or a GGUF file")
    return Plan("none" if quantization == "auto" else quantization)


def hf_source(path: str) -> dict:
    """from_pretrained's arguments for a folder, an id, or a .gguf file (its folder and name)."""
    if path.endswith(".gguf"):
        return {"pretrained_model_name_or_path": str(pathlib.Path(path).parent), "gguf_file": pathlib.Path(path).name}
    return {"pretrained_model_name_or_path": path}


def hf_model(p: Plan, path: str, device: torch.device, dtype: torch.dtype, attn: str):
    """The transformers model on `device`. For GGUF its linears stay on the meta device (they are filled in our
    decoder by `quantize`) and everything else comes from the file: norms, biases, rotary tables, the embedding
    (gathered from its codes where quantized)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if p.method != "gguf":
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn).to(device).eval()
    from floodway.engine.quant.gguf_weights import GGUFWeights

    gguf = GGUFWeights(p.gguf_file)  # first: its errors name the file
    config = AutoConfig.from_pretrained(**hf_source(path))
    config.quantization_config = None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    model.floodway_gguf = gguf
    model.floodway_shapes = {n: tuple(t.shape) for n, t in model.named_parameters()}
    base = model.model
    base.rotary_emb = type(base.rotary_emb)(config=config).to(device)
    floats = {}
    for name, shape in model.floodway_shapes.items():
        if name.startswith("lm_head.") or name == "model.embed_tokens.weight" or _slot_part(name):
            continue
        floats[name] = gguf.get(name, shape).to(device, dtype)
    model.load_state_dict(floats, strict=False, assign=True)
    emb = gguf.get("model.embed_tokens.weight", model.floodway_shapes["model.embed_tokens.weight"])
    base.embed_tokens = linear.QuantEmbedding(emb, device, dtype) if isinstance(emb, weights.QuantWeight) \
        else nn.Embedding.from_pretrained(emb.to(device, dtype))
    return model.eval()


def _slot_part(name: str) -> bool:
    return any(f".{part}." in name for parts in SLOTS.values() for part in parts)


def quantize(p: Plan, hf, decoder, device: torch.device, dtype: torch.dtype) -> None:
    """Fills our decoder's linears with the plan's weights (float plans: nothing to do). decoder is None where
    the model runs in transformers' modules."""
    if p.method == "none":
        return
    if decoder is None:
        raise linear.Unsupported(f"--quantization {p.method} serves only our own decoder (Llama, Mistral, Qwen2 "
                                 f"with --model-impl auto); {type(hf).__name__} runs in transformers' modules: use "
                                 f"--quantization none")
    if p.method == "gguf":
        gguf, shapes = hf.floodway_gguf, hf.floodway_shapes

        def build(prefix, parts, current):
            return _from_file(gguf, shapes, [prefix + part for part in parts], device, dtype)

        head = "lm_head.weight" if "lm_head.weight" in shapes and gguf.has("lm_head.weight") \
            else "model.embed_tokens.weight"
        decoder.lm_head = _from_file(gguf, {**shapes, "lm_head.weight": shapes["model.embed_tokens.weight"]},
                                     [head.removesuffix(".weight")], device, dtype)
    else:
        bits = int(p.method[3:])

        def build(prefix, parts, current):
            return linear.make(weights.rtn(current.weight, bits), current.bias, device, dtype)

    for i, layer in enumerate(decoder.layers):
        for slot, parts in SLOTS.items():
            setattr(layer, slot, build(f"model.layers.{i}.", parts, getattr(layer, slot)))


def _from_file(gguf, shapes: dict, names: list[str], device, dtype) -> nn.Module:
    """One linear stacking the named projections' weights (and biases, where the file has them)."""
    parts = [gguf.get(f"{n}.weight", shapes[f"{n}.weight"]) for n in names]
    bias = torch.cat([gguf.get(f"{n}.bias", shapes[f"{n}.bias"]) for n in names]) \
        if f"{names[0]}.bias" in shapes else None
    if all(isinstance(w, weights.QuantWeight) for w in parts):
        return linear.make(weights.merge(parts), bias, device, dtype)
    if any(isinstance(w, weights.QuantWeight) for w in parts):
        raise ValueError(f"{gguf.path}: {', '.join(names)} mix quantized and float tensors; they are served as one "
                         f"linear here")
    w = torch.cat(parts)
    out = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, device=device, dtype=dtype)
    out.weight = nn.Parameter(w.to(device, dtype), requires_grad=False)
    if bias is not None:
        out.bias = nn.Parameter(bias.to(device, dtype), requires_grad=False)
    return out


def kernels(model) -> dict[str, str]:
    """{linear: kernel} of our decoder's linears (every layer's, joined where they differ), or of transformers'."""
    layers = getattr(model, "layers", None)
    if layers is None or not hasattr(model, "lm_head"):
        found = sorted({linear.kernel_of(m) for m in model.modules()
                        if isinstance(m, nn.Linear) or type(m).__name__ == "PackedLinear"})
        return {"transformers linears": " | ".join(found)}
    out = {slot: " | ".join(sorted({linear.kernel_of(getattr(layer, slot)) for layer in layers})) for slot in SLOTS}
    out["lm_head"] = linear.kernel_of(model.lm_head)
    return out
