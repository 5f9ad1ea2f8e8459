"""A model's shape (layers, heads, widths, parameter count) from its config.json, torch-free.

Sources, in order: a built-in name, a config.json file, a local folder holding one, then the Hugging Face
cache read offline in huggingface_hub's layout (models--ORG--NAME/snapshots/REV/config.json). Architectures
we do not know by name are read through the standard fields (Llama style, or GPT-2 style n_layer/n_head/
n_embd); the parameter count is estimated from them unless the caller passes it.
"""

import dataclasses
import json
import os
import pathlib
from dataclasses import dataclass

from floodway.engine.models.builtin import BUILTIN_MODELS, model_config
from floodway.engine.quant.formats import weight_bits
from floodway.operator.planner.units import ConfigNotFound, PlanError


@dataclass(frozen=True)
class ModelShape:
    name: str
    source: str  # where the config came from
    model_type: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int  # per expert for mixture-of-experts models
    vocab_size: int
    max_position_embeddings: int | None
    config_dtype: str | None
    quantization_bits: int | None  # from config.json's quantization_config, when the checkpoint is quantized
    params: int
    params_source: str  # "estimated from config.json" or "given with --params"
    active_params: int  # read per token at batch 1 (less than params only for mixture-of-experts)
    num_experts: int = 0
    experts_per_token: int = 0


def hf_cache_dir() -> pathlib.Path:
    """The hub cache folder, resolved from the same variables huggingface_hub reads."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return pathlib.Path(os.path.expandvars(os.path.expanduser(os.environ[var])))
    xdg = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    home = os.environ.get("HF_HOME", os.path.join(xdg, "huggingface"))
    return pathlib.Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def _cached_config(repo_id: str, revision: str = "main") -> pathlib.Path | None:
    repo = hf_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / revision
    snapshot = ref.read_text().strip() if ref.is_file() else revision
    found = repo / "snapshots" / snapshot / "config.json"
    if found.is_file():
        return found
    # No ref for that revision: take the newest snapshot that has a config.json.
    candidates = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


def read_config(model: str) -> tuple[dict, str]:
    """(config dict, where it came from) for a built-in name, a config.json, a folder, or a cached Hub id."""
    if model in BUILTIN_MODELS:
        return model_config(BUILTIN_MODELS[model]), "built-in"
    path = pathlib.Path(os.path.expanduser(model))
    if path.is_dir():
        path = path / "config.json"
    elif not path.is_file() and model.count("/") == 1 and not model.startswith((".", "/")):
        path = _cached_config(model) or path
    if not path.is_file():
        raise ConfigNotFound(f"model {model!r}: no config.json found (not a built-in name, not a local file or folder, "
                        f"and not in the Hugging Face cache at {hf_cache_dir()}); pass a folder or a config.json")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PlanError(f"model {model!r}: cannot read {path}: {e}") from e
    if not isinstance(cfg, dict):
        raise PlanError(f"model {model!r}: {path} is not a JSON object")
    return cfg, str(path)


def _first(cfg: dict, *keys, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def shape_from_config(cfg: dict, name: str, source: str, params: float | None = None) -> ModelShape:
    """Reads the standard fields; estimates the parameter count unless `params` is given."""
    if "num_hidden_layers" not in cfg and "n_layer" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "quantization_config"}}
    gpt2_style = "n_layer" in cfg or cfg.get("model_type") == "gpt2"
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "num_attention_heads", "n_head")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    vocab = _first(cfg, "vocab_size")
    missing = [k for k, v in (("num_hidden_layers", layers), ("num_attention_heads", heads),
                              ("hidden_size", hidden), ("vocab_size", vocab)) if not isinstance(v, int) or v <= 0]
    if missing:
        raise PlanError(f"model {name!r}: config at {source} lacks {', '.join(missing)}; "
                        "cannot size it (pass a config.json with the standard fields)")
    kv_heads = 1 if cfg.get("multi_query") else _first(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _first(cfg, "head_dim", default=hidden // heads)
    experts = _first(cfg, "num_local_experts", "num_experts", default=0)
    inter = _first(cfg, "moe_intermediate_size" if experts else "intermediate_size", "intermediate_size",
                   "n_inner", "ffn_dim", default=4 * hidden)
    bits = weight_bits(cfg)
    shape = ModelShape(
        name=name, source=source, model_type=str(cfg.get("model_type", "unknown")), num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, hidden_size=hidden, intermediate_size=inter,
        vocab_size=vocab, max_position_embeddings=_first(cfg, "max_position_embeddings", "n_positions"),
        config_dtype=_first(cfg, "torch_dtype", "dtype"), quantization_bits=bits, params=0, params_source="",
        active_params=0, num_experts=experts, experts_per_token=_first(cfg, "num_experts_per_tok", default=0))
    total, active = estimate_params(cfg, shape, gpt2_style)
    if params is not None:
        if params <= 0:
            raise PlanError(f"--params must be positive, got {params}")
        active, total = round(active * params / total), round(params)
    return dataclasses.replace(shape, params=total, active_params=active,
                    params_source="given with --params" if params is not None else "estimated from config.json")


def estimate_params(cfg: dict, s: ModelShape, gpt2_style: bool) -> tuple[int, int]:
    """(total, active per token). Llama-style: gated MLP, RMSNorm, no biases unless the config says so
    (Qwen2 has q/k/v biases). GPT-2 style: plain MLP, LayerNorm, biases, learned positions, tied head."""
    h, q, kv = s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    o_bias = gpt2_style or bool(cfg.get("attention_bias"))
    qkv_bias = o_bias or s.model_type.startswith("qwen2")
    attn = h * (q + 2 * kv) + q * h + (q + 2 * kv) * qkv_bias + h * o_bias
    if gpt2_style:
        mlp = 2 * h * s.intermediate_size + s.intermediate_size + h
        norms = 2 * 2 * h
    else:
        mlp = 3 * h * s.intermediate_size + (2 * s.intermediate_size + h if cfg.get("mlp_bias") else 0)
        norms = 2 * h + (2 * s.head_dim if s.model_type.startswith("qwen3") else 0)  # Qwen3 normalises q and k
    expert_mlp, dense_mlp = (mlp, 0) if s.num_experts else (0, mlp)
    shared = cfg.get("shared_expert_intermediate_size") or 0
    router = h * s.num_experts + (3 * h * shared + h if shared else 0)
    per_layer = attn + norms + dense_mlp + router
    tied = cfg.get("tie_word_embeddings", gpt2_style)
    embeddings = s.vocab_size * h * (1 if tied else 2)
    final_norm = 2 * h if gpt2_style else h
    positions = (s.max_position_embeddings or 0) * h if gpt2_style else 0
    fixed = embeddings + final_norm + positions + s.num_layers * per_layer
    total = fixed + s.num_layers * s.num_experts * expert_mlp
    active = fixed + s.num_layers * min(s.experts_per_token or s.num_experts, s.num_experts) * expert_mlp
    return total, active


def load_shape(model: str, params: float | None = None) -> ModelShape:
    cfg, source = read_config(model)
    return shape_from_config(cfg, model, source, params)


def moe_weight_fraction(shape: ModelShape, batch: int) -> float:
    """Share of the weights one decode step reads at `batch`: all of them for a dense model; for a
    mixture-of-experts model the shared part plus the experts that `batch` tokens touch under uniform routing."""
    if not shape.num_experts or shape.params == shape.active_params:
        return 1.0
    k, e = shape.experts_per_token, shape.num_experts
    per_expert = (shape.params - shape.active_params) / (e - k)
    dense = shape.params - e * per_expert
    touched = e * (1 - (1 - k / e) ** batch)
    return min(1.0, (dense + touched * per_expert) / shape.params)
