"""PEFT LoRA folders (adapter_config.json + adapter_model.safetensors) read into our decoder's layout.

Our decoder merges q/k/v into one linear and gate/up into another, so an adapter's per-projection A [r, in] and
B [out, r] become, per layer and merged linear, one A [in, P * R] and one block-diagonal B [P * R, out] (P parts,
R = --max-lora-rank): part p's A^T fills columns p*R.., its B^T rows p*R.. under its own output columns, and the
rest stays zero. The zeros add exact zeros, so a merged delta equals the per-projection deltas side by side.
Every refusal is a LoRAError naming the folder and what to change.
"""

import json
import math
import pathlib
import re
from dataclasses import dataclass

import torch

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
# Hugging Face projection -> (our linear, part index within it).
TARGETS = {"q_proj": ("qkv", 0), "k_proj": ("qkv", 1), "v_proj": ("qkv", 2), "o_proj": ("o_proj", 0),
           "gate_proj": ("gate_up", 0), "up_proj": ("gate_up", 1), "down_proj": ("down_proj", 0)}
KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


class LoRAError(ValueError):
    """An adapter this engine cannot serve (the server answers 400)."""


class LoRANotFound(LoRAError):
    """The adapter's folder or files do not exist (the server answers 404)."""


@dataclass(frozen=True)
class Geometry:
    """Our decoder's linears as an adapter must match them: per linear, its input size and its parts' outputs."""

    num_layers: int
    linears: dict[str, tuple[int, tuple[int, ...]]]  # linear -> (in_features, part out_features)


def geometry_of(decoder) -> Geometry:
    layer = decoder.layers[0]
    hd, nq, nkv = layer.head_dim, layer.num_heads, layer.num_kv_heads
    hidden, inter = layer.qkv.in_features, layer.down_proj.in_features
    return Geometry(len(decoder.layers), {"qkv": (hidden, (nq * hd, nkv * hd, nkv * hd)),
                                          "o_proj": (nq * hd, (hidden,)), "gate_up": (hidden, (inter, inter)),
                                          "down_proj": (inter, (hidden,))})


@dataclass
class AdapterWeights:
    """One adapter in slot layout (CPU): (layer, linear) -> (A [in, P*R], B [P*R, out]); absent pairs add nothing."""

    rank: int
    scale: float
    tensors: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for pair in self.tensors.values() for t in pair)


def read_config(path: str, max_rank: int) -> dict:
    """The adapter's config, checked for what this engine serves (reads adapter_config.json only)."""
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise LoRANotFound(f"no adapter folder at {path!r}")
    file = folder / CONFIG_FILE
    if not file.is_file():
        raise LoRANotFound(f"{path!r} has no {CONFIG_FILE} (a PEFT adapter folder has it)")
    try:
        cfg = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoRAError(f"{file} is not valid JSON: {e}") from None
    except OSError as e:  # e.g. a volume whose files this process's user may not read
        raise LoRAError(f"{file} could not be read: {e}") from None
    if not isinstance(cfg, dict):
        raise LoRAError(f"{file} must hold a JSON object")
    if cfg.get("peft_type", "LORA") != "LORA":
        raise LoRAError(f"{file}: peft_type is {cfg.get('peft_type')!r}; only LORA adapters are served")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise LoRAError(f"{file}: r must be a positive integer, got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise LoRAError(f"{file}: lora_alpha must be a number, got {alpha!r}")
    if r > max_rank:
        raise LoRAError(f"{file}: rank {r} exceeds the largest this engine serves (--max-lora-rank {max_rank})")
    refused = {"use_dora": "DoRA", "fan_in_fan_out": "fan_in_fan_out (Conv1D) layers", "modules_to_save":
               "modules_to_save (fully trained extra modules)", "rank_pattern": "per-module ranks (rank_pattern)",
               "alpha_pattern": "per-module alphas (alpha_pattern)"}
    for key, what in refused.items():
        if cfg.get(key):
            raise LoRAError(f"{file}: {what} is not served; an adapter here is plain LoRA with one r and lora_alpha")
    if cfg.get("bias", "none") != "none":
        raise LoRAError(f"{file}: bias {cfg['bias']!r} is not served (bias must be none)")
    return cfg


def load(path: str, geometry: Geometry, max_rank: int, dtype: torch.dtype) -> AdapterWeights:
    """Reads and checks a PEFT adapter folder into slot layout (see the module docstring)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    cfg = read_config(path, max_rank)
    file = pathlib.Path(path) / WEIGHTS_FILE
    if not file.is_file():
        raise LoRANotFound(f"{path!r} has no {WEIGHTS_FILE} (save the adapter with safe_serialization)")
    try:
        raw = load_file(str(file))
    except (SafetensorError, OSError) as e:
        raise LoRAError(f"{file} could not be read: {e}") from None
    r = cfg["r"]
    parts: dict[tuple[int, str, int], dict[str, torch.Tensor]] = {}
    for key, t in raw.items():
        m = KEY.match(key)
        if m is None or m.group(2) not in TARGETS:
            raise LoRAError(f"{file}: tensor {key!r} is not a LoRA weight of {', '.join(TARGETS)} in a decoder layer")
        layer = int(m.group(1))
        if layer >= geometry.num_layers:
            raise LoRAError(f"{file}: base-model mismatch: the adapter has layer {layer}, the served model "
                            f"{geometry.num_layers} layers")
        linear, part = TARGETS[m.group(2)]
        parts.setdefault((layer, linear, part), {})[m.group(3)] = t
    tensors: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    for (layer, linear, part), ab in sorted(parts.items()):
        name = f"layer {layer} {[k for k, v in TARGETS.items() if v == (linear, part)][0]}"
        if set(ab) != {"A", "B"}:
            raise LoRAError(f"{file}: {name} has lora_{'A' if 'A' in ab else 'B'} but not its pair")
        a, b = ab["A"], ab["B"]
        n_in, outs = geometry.linears[linear]
        if a.shape != (r, n_in) or b.shape != (outs[part], r):
            raise LoRAError(f"{file}: base-model mismatch at {name}: lora_A {list(a.shape)}, lora_B {list(b.shape)}; "
                            f"this model and r={r} need [{r}, {n_in}] and [{outs[part]}, {r}]")
        if (layer, linear) not in tensors:
            tensors[layer, linear] = (torch.zeros(n_in, len(outs) * max_rank, dtype=dtype),
                                      torch.zeros(len(outs) * max_rank, sum(outs), dtype=dtype))
        place(*tensors[layer, linear], a, b, part * max_rank, sum(outs[:part]))
    if not tensors:
        raise LoRAError(f"{file} holds no LoRA weights")
    return AdapterWeights(r, scale_of(cfg), tensors)


def scale_of(cfg: dict) -> float:
    """PEFT's scaling of the delta: lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (pure)."""
    return cfg["lora_alpha"] / math.sqrt(cfg["r"]) if cfg.get("use_rslora") else cfg["lora_alpha"] / cfg["r"]


def place(big_a: torch.Tensor, big_b: torch.Tensor, a: torch.Tensor, b: torch.Tensor, row: int, col: int) -> None:
    """Writes one projection's A [r, in] and B [out, r] into its merged linear's slot layout: A^T at columns
    row.., B^T at rows row.. and its output columns col..."""
    r = a.shape[0]
    big_a[:, row:row + r] = a.t()
    big_b[row:row + r, col:col + b.shape[0]] = b.t()
