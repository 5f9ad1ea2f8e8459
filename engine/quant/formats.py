"""`--quantization`'s values and the Hugging Face checkpoint formats we load, read from config.json's
`quantization_config` (torch-free: the engine's config and the operator's runtime table import it).

A checkpoint is served as its `quant_method` says (auto) or as named with vLLM's flag names; each is refused at
startup, naming the format and the alternative, where its bits, grouping or variant has no kernel here. The
tensors' layouts are in hf_decode.py.
"""

from dataclasses import dataclass

METHODS = ("auto", "none", "gguf", "int8", "int4", "awq", "gptq", "compressed-tensors", "fp8")
CHECKPOINT_METHODS = ("awq", "gptq", "compressed-tensors", "fp8")
# What to do instead where a checkpoint's variant is refused: vLLM serves every one of these formats.
ELSEWHERE = "vLLM (engine.runtime vllm)"


class Unsupported(ValueError):  # a ValueError: the CLIs report it as a bad setting, without a traceback
    pass


@dataclass(frozen=True)
class Scheme:
    """One quantized checkpoint's weights, as the loader decodes them."""
    method: str  # awq, gptq, compressed-tensors or fp8 (the --quantization value)
    layout: str  # awq, gptq, packed (compressed-tensors pack-quantized) or e4m3 (FP8 weights with scales)
    bits: int
    group: int | None  # columns per scale; None: one scale per output row (per channel) or per tensor
    zero_offset: int = 0  # GPTQ v1 stores each zero point minus one
    name: str = ""  # for logs and the kernel names: "GPTQ int4", "FP8 E4M3", ...

    @property
    def e4m3(self) -> bool:
        return self.layout == "e4m3"


def declared_method(config: dict) -> str | None:
    """The --quantization value a config.json's quantization_config declares (None: a float checkpoint)."""
    q = config.get("quantization_config")
    return str(q.get("quant_method", "unknown")).lower() if q else None


def weight_bits(config: dict) -> int | None:
    """The bits a quantized checkpoint stores its weights in, read from config.json's quantization_config whether or
    not this engine serves the variant (the planner sizes any): AWQ's and GPTQ's `bits` (`w_bit`), compressed-tensors'
    config groups' weights `num_bits` (the widest, where groups differ), 8 for FP8; None: a float checkpoint, or bits
    the config does not say."""
    q = config.get("quantization_config") or {}
    groups = [(g.get("weights") or {}).get("num_bits") for g in (q.get("config_groups") or {}).values()]
    bits = q.get("bits") or q.get("w_bit") or max((b for b in groups if isinstance(b, int)), default=None)
    if bits is None and "fp8" in str(q.get("quant_method", "")).lower():
        bits = 8
    return bits if isinstance(bits, int) and bits > 0 else None


def scheme(config: dict, path: str) -> Scheme:
    """The checkpoint's scheme from its config.json (pure); Unsupported names what is not served here."""
    q = config["quantization_config"]
    method = declared_method(config)
    if method not in CHECKPOINT_METHODS:
        raise Unsupported(f"{path} is a {method} checkpoint (quantization_config), which this engine does not load: "
                          f"we load {', '.join(CHECKPOINT_METHODS)} checkpoints, GGUF files and float ones; serve it "
                          f"with {ELSEWHERE}")
    return {"awq": _awq, "gptq": _gptq, "compressed-tensors": _compressed, "fp8": _fp8}[method](q, path)


def _group(size, fmt: str, path: str) -> int | None:
    if size in (-1, None):
        return None
    if not isinstance(size, int) or size <= 0:
        raise Unsupported(f"{path}: {fmt} group_size {size!r} is not a positive number of columns (or -1)")
    return size


def _awq(q: dict, path: str) -> Scheme:
    version = str(q.get("version") or q.get("format") or "gemm").lower()
    bits = q.get("bits", q.get("w_bit"))
    if version != "gemm":
        raise Unsupported(f"{path}: AWQ {version} checkpoints are not served here (AWQ GEMM is): re-export it as "
                          f"GEMM, or serve it with {ELSEWHERE}")
    if bits != 4:
        raise Unsupported(f"{path}: AWQ with {bits}-bit codes is not served here (4-bit AWQ GEMM is): use a 4-bit "
                          f"checkpoint, or {ELSEWHERE}")
    return Scheme("awq", "awq", 4, _group(q.get("group_size", q.get("q_group_size")), "AWQ", path), name="AWQ int4")


def _gptq(q: dict, path: str) -> Scheme:
    fmt = str(q.get("checkpoint_format") or q.get("format") or "gptq").lower()
    bits = q.get("bits")
    if fmt not in ("gptq", "gptq_v2"):
        raise Unsupported(f"{path}: GPTQ checkpoint_format {fmt} is not served here (gptq and gptq_v2 are): "
                          f"serve it with {ELSEWHERE}")
    if bits not in (4, 8):
        raise Unsupported(f"{path}: GPTQ with {bits}-bit codes has no kernel here (4- and 8-bit GPTQ do): use a 4- "
                          f"or 8-bit checkpoint, or {ELSEWHERE}")
    if q.get("dynamic"):
        raise Unsupported(f"{path}: GPTQ with per-module overrides (quantization_config.dynamic) is not served "
                          f"here: serve it with {ELSEWHERE}")
    # v1 ("gptq") wrote zero - 1; v2 writes the zero point itself
    return Scheme("gptq", "gptq", bits, _group(q.get("group_size"), "GPTQ", path), 1 if fmt == "gptq" else 0,
                  f"GPTQ int{bits}")


def _compressed(q: dict, path: str) -> Scheme:
    status = q.get("quantization_status", "compressed")
    if status != "compressed":
        raise Unsupported(f"{path}: compressed-tensors checkpoint in status {status!r}; we load compressed ones")
    for extra in ("sparsity_config", "transform_config"):
        if q.get(extra):
            raise Unsupported(f"{path}: compressed-tensors with a {extra} is not served here: serve it with "
                              f"{ELSEWHERE}")
    groups = list((q.get("config_groups") or {}).values())
    weights = [g.get("weights") or {} for g in groups]
    if not groups or any(w != weights[0] for w in weights):
        raise Unsupported(f"{path}: compressed-tensors checkpoints load here with one weight scheme for every "
                          f"quantized linear (this one has {len(groups)} different ones): serve it with {ELSEWHERE}")
    w = weights[0]
    fmt = groups[0].get("format") or q.get("format")
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    if kind == "int" and bits in (4, 8) and fmt == "pack-quantized":
        layout, name = "packed", f"compressed-tensors W{bits}A16"
    elif kind == "float" and bits == 8 and fmt == "float-quantized":
        layout, name = "e4m3", "compressed-tensors FP8"
    else:
        raise Unsupported(f"{path}: compressed-tensors {fmt} with {bits}-bit {kind} weights is not served here "
                          f"(pack-quantized W4A16/W8A16 and float-quantized FP8 are): serve it with {ELSEWHERE}")
    if strategy not in (("group", "channel", "tensor") if layout == "packed" else ("channel", "tensor")):
        raise Unsupported(f"{path}: compressed-tensors {name} with strategy {strategy} is not served here "
                          f"({'group, channel or tensor' if layout == 'packed' else 'channel or tensor'} scales "
                          f"are): serve it with {ELSEWHERE}")
    group = _group(w.get("group_size"), "compressed-tensors", path) if strategy == "group" else None
    return Scheme("compressed-tensors", layout, bits, group, name=name)


def _fp8(q: dict, path: str) -> Scheme:
    if q.get("weight_block_size"):
        raise Unsupported(f"{path}: block-wise FP8 (weight_block_size {q['weight_block_size']}) is not served here "
                          f"(per-tensor and per-channel FP8 are): serve it with {ELSEWHERE}")
    fmt = str(q.get("fmt", "e4m3")).lower()
    if fmt != "e4m3":
        raise Unsupported(f"{path}: FP8 {fmt} weights are not served here (E4M3 are): serve it with {ELSEWHERE}")
    return Scheme("fp8", "e4m3", 8, None, name="FP8 E4M3")
