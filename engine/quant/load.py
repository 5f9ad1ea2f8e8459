"""Which weights a model is served with (`--quantization`), and filling our decoder's linears with them.

auto: the checkpoint's own (a .gguf file's types; the built-in SmolLM2's shipped Q4_1 GGUF; a Hugging Face
checkpoint's quantization_config), float otherwise; none: float weights (SmolLM2: its float32 folder); gguf: the
GGUF file as it ships; awq, gptq, compressed-tensors, fp8: such a checkpoint as it ships (formats.py; fp8 on a float
checkpoint quantizes it at load, as vLLM does); int8/int4: round-to-nearest group-wise at load of a float
checkpoint. Quantized weights live only in our decoder's linears (merged q/k/v, o_proj, merged gate/up, down_proj;
the head too where the file quantizes it), so they need it: transformers' modules are refused rather than served
in float.
"""

import itertools
import json
import logging
import pathlib
from dataclasses import dataclass

import torch
from floodway.engine.models import smollm2
from floodway.engine.quant import formats, linear, weights
from floodway.engine.quant.formats import METHODS
from torch import nn

log = logging.getLogger("floodway.engine")

# Quantized at load of a float checkpoint: method -> the quantizer.
AT_LOAD = {"int8": lambda w: weights.rtn(w, 8), "int4": lambda w: weights.rtn(w, 4), "fp8": weights.fp8}
# Our decoder's linears: attribute -> the Hugging Face projections it stacks.
SLOTS = {"qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "o_proj": ("self_attn.o_proj",),
         "gate_up": ("mlp.gate_proj", "mlp.up_proj"), "down_proj": ("mlp.down_proj",)}


@dataclass(frozen=True)
class Plan:
    method: str  # none, gguf, int8, int4, or a checkpoint's (awq, gptq, compressed-tensors, fp8)
    gguf_file: str | None = None
    scheme: formats.Scheme | None = None  # a quantized Hugging Face checkpoint's

    @property
    def from_file(self) -> bool:
        """The quantized weights are read as stored (a GGUF file, a quantized checkpoint), not quantized at load."""
        return self.gguf_file is not None or self.scheme is not None

    @property
    def alternative(self) -> str:
        """What to do where this plan cannot be served: a quantized checkpoint has no float weights to fall to."""
        return f"serve it with {formats.ELSEWHERE}" if self.scheme else f"use {linear.NO_QUANTIZATION}"

    def dtype_name(self, dtype: str, device: torch.device) -> str:
        """auto means bfloat16 for quantized weights on CPU: the only dtype their kernels serve there."""
        return "bfloat16" if dtype == "auto" and self.method != "none" and device.type == "cpu" else dtype

    def check(self, device: torch.device, dtype: torch.dtype) -> None:
        """Refuses, before any weight is read, what no kernel on this device serves."""
        if self.scheme:
            s = self.scheme
            linear.check(s.name, s.bits, s.group, device, dtype, s.e4m3, alternative=formats.ELSEWHERE)
        elif self.method == "fp8":
            linear.check("fp8", 8, None, device, dtype, e4m3=True)
        elif self.method in ("int8", "int4"):
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
    config_file = pathlib.Path(path) / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    declared = formats.declared_method(config)
    if declared:
        scheme = formats.scheme(config, path)  # first: it refuses formats we do not load
        if quantization not in ("auto", declared):
            raise ValueError(f"{path} is a {scheme.name} checkpoint: serve it with --quantization {declared} (or "
                             f"auto); {quantization} applies to other checkpoints")
        return Plan(declared, scheme=scheme)
    if quantization in formats.CHECKPOINT_METHODS and quantization not in AT_LOAD:
        raise ValueError(f"--quantization {quantization} serves {quantization} checkpoints (config.json with a "
                         f"quantization_config); {path} has none: quantize a float checkpoint at load with "
                         f"--quantization int4, int8 or fp8")
    return Plan("none" if quantization == "auto" else quantization)


def hf_source(path: str) -> dict:
    """from_pretrained's arguments for a folder, an id, or a .gguf file (its folder and name)."""
    if path.endswith(".gguf"):
        return {"pretrained_model_name_or_path": str(pathlib.Path(path).parent), "gguf_file": pathlib.Path(path).name}
    return {"pretrained_model_name_or_path": path}


def hf_model(p: Plan, path: str, device: torch.device, dtype: torch.dtype, attn: str):
    """The transformers model on `device`. For weights read quantized from a file its linears stay on the meta
    device (they are filled in our decoder by `quantize`) and everything else comes from the file: norms, biases,
    rotary tables, the embedding (gathered from its codes where quantized)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not p.from_file:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn).to(device).eval()
    source = _source(p, path)  # first: its errors name the file
    config = AutoConfig.from_pretrained(**hf_source(path))
    config.quantization_config = None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    model.floodway_source = source
    model.floodway_shapes = {n: tuple(t.shape) for n, t in model.named_parameters()}
    base = model.model
    base.rotary_emb = type(base.rotary_emb)(config=config).to(device)
    floats = {}
    for name, shape in model.floodway_shapes.items():
        if name.startswith("lm_head.") or name == "model.embed_tokens.weight" or _slot_part(name):
            continue
        floats[name] = source.get(name, shape).to(device, dtype)
    model.load_state_dict(floats, strict=False, assign=True)
    emb = source.get("model.embed_tokens.weight", model.floodway_shapes["model.embed_tokens.weight"])
    base.embed_tokens = linear.QuantEmbedding(emb, device, dtype) if isinstance(emb, weights.QuantWeight) \
        else nn.Embedding.from_pretrained(emb.to(device, dtype))
    return model.eval()


def _source(p: Plan, path: str):
    """The file's tensors by Hugging Face parameter name."""
    if p.gguf_file:
        from floodway.engine.quant.gguf_weights import GGUFWeights

        return GGUFWeights(p.gguf_file)
    from floodway.engine.quant.hf_weights import HFQuantWeights

    return HFQuantWeights(path, p.scheme)


def _slot_part(name: str) -> bool:
    return any(f".{part}." in name for parts in SLOTS.values() for part in parts)


def quantize(p: Plan, hf, decoder, device: torch.device, dtype: torch.dtype) -> None:
    """Fills our decoder's linears with the plan's weights (float plans: nothing to do). decoder is None where
    the model runs in transformers' modules."""
    if p.method == "none":
        return
    if decoder is None:
        raise linear.Unsupported(f"--quantization {p.method} serves only our own decoder (Llama, Mistral, Qwen2 "
                                 f"with --model-impl auto); {type(hf).__name__} runs in transformers' modules: "
                                 f"{p.alternative}")
    if p.from_file:
        source, shapes = hf.floodway_source, hf.floodway_shapes

        def build(prefix, parts, current):
            return _from_file(source, shapes, [prefix + part for part in parts], device, dtype)

        head = "lm_head.weight" if "lm_head.weight" in shapes and source.has("lm_head.weight") \
            else "model.embed_tokens.weight"
        decoder.lm_head = _from_file(source, {**shapes, "lm_head.weight": shapes["model.embed_tokens.weight"]},
                                     [head.removesuffix(".weight")], device, dtype)
    else:
        quantizer = AT_LOAD[p.method]

        def build(prefix, parts, current):
            return linear.make(quantizer(current.weight), current.bias, device, dtype)

    for i, layer in enumerate(decoder.layers):
        for slot, parts in SLOTS.items():
            setattr(layer, slot, build(f"model.layers.{i}.", parts, getattr(layer, slot)))


def _from_file(source, shapes: dict, names: list[str], device, dtype) -> nn.Module:
    """One linear stacking the named projections' weights (and biases, where the file has them)."""
    parts = [source.get(f"{n}.weight", shapes[f"{n}.weight"]) for n in names]
    biases = [source.get(f"{n}.bias", shapes[f"{n}.bias"]) for n in names] if f"{names[0]}.bias" in shapes else None
    bias = None if biases is None else torch.cat(biases)
    if all(isinstance(w, weights.QuantWeight) for w in parts):
        # projections quantized alike merge into one linear; a file that mixes types (llama.cpp's K-quant files give
        # v_proj more bits than q/k) gets one linear per run of alike ones
        pairs = zip(parts, biases or [None] * len(parts), strict=True)
        made = []
        for _, run in itertools.groupby(pairs, lambda pair: weights.kind(pair[0])):
            ws, bs = zip(*run, strict=True)
            made.append(linear.make(weights.merge(list(ws)), None if biases is None else torch.cat(bs), device, dtype))
        return made[0] if len(made) == 1 else linear.Stacked(made)
    if any(isinstance(w, weights.QuantWeight) for w in parts):
        raise ValueError(f"{source.path}: {', '.join(names)} mix quantized and float tensors; they are served as "
                         f"one linear here")
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
