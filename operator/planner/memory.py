"""Memory arithmetic: weights by precision, KV cache bytes per token and per sequence (GQA-aware), the KV
pool left on the GPUs, and how many sequences it holds. Pure functions of numbers and a ModelShape."""

import math
from dataclasses import dataclass

from floodway.operator.planner.gpus import GpuSpec
from floodway.operator.planner.model_shape import ModelShape
from floodway.operator.planner.units import GIB, PlanError
from floodway.operator.spec.models import EngineSpec

_ENGINE = EngineSpec()  # the spec's engine defaults are the planner's

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "bf16": "bfloat16", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


@dataclass(frozen=True)
class WeightFormat:
    """How weights are stored: `precision` codes plus `group_bytes` of scales and offsets per `group` input
    columns (group 0: scales per tensor or per output channel, a negligible share)."""

    precision: str
    group: int = 0
    group_bytes: float = 0

    @property
    def name(self) -> str:
        return f"{self.precision} (groups of {self.group})" if self.group else self.precision

    def bytes(self, params: int) -> int:
        return weight_bytes(params, self.precision) + (math.ceil(params / self.group * self.group_bytes)
                                                       if self.group else 0)


# Weight-only quantization methods (engine.quantization, `floodway plan --quantization`) and how each stores its
# weights; none: float, in the compute dtype. auto, gguf and compressed-tensors: the checkpoint's own bits
# (CHECKPOINT_OWN).
QUANTIZATIONS = {
    "none": None,
    "fp8": WeightFormat("fp8"),  # E4M3, a scale per tensor or per output channel
    # our engine's round-to-nearest at load (engine/quant/weights.py): a float32 scale and offset per 32 columns
    "int8": WeightFormat("int8", 32, 8), "int4": WeightFormat("int4", 32, 8),
    # AWQ and GPTQ checkpoints: an fp16 scale and a packed 4-bit zero point per 128 columns
    "awq": WeightFormat("int4", 128, 2.5), "gptq": WeightFormat("int4", 128, 2.5),
}
CHECKPOINT_OWN = ("auto", "gguf", "compressed-tensors")


def default_overhead_bytes(gpu_memory_bytes: int) -> int:
    """Per GPU, kept out of the KV pool for activations: max(1 GiB, 5% of the GPU), the engine's own reserve."""
    return max(GIB, int(0.05 * gpu_memory_bytes))


def canonical_dtype(dtype: str) -> str:
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in DTYPE_BYTES:
        raise PlanError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(DTYPE_BYTES)}")
    return name


def compute_dtype(dtype: str, on_gpu: bool) -> str:
    """The engine's rule for "auto": bfloat16 on a GPU, float32 on CPU."""
    if dtype == "auto":
        return "bfloat16" if on_gpu else "float32"
    return canonical_dtype(dtype)


def weight_format(shape: ModelShape, dtype: str, quantization: str | None) -> WeightFormat:
    """--quantization wins; else (unset, auto or gguf) a quantized checkpoint's own bits; else the compute dtype."""
    q = (quantization or "auto").lower()
    if q not in CHECKPOINT_OWN:
        if q not in QUANTIZATIONS:
            raise PlanError(f"unknown quantization {quantization!r}; use one of "
                            f"{', '.join((*CHECKPOINT_OWN, *QUANTIZATIONS))}")
        return QUANTIZATIONS[q] or WeightFormat(dtype)
    return WeightFormat({4: "int4", 8: "int8"}.get(shape.quantization_bits, dtype))


def precisions(shape: ModelShape, dtype: str, quantization: str | None, kv_cache_dtype: str | None,
               on_gpu: bool = True) -> tuple[WeightFormat, str]:
    """(weight format, KV cache dtype); the KV cache follows the compute dtype unless told otherwise."""
    act = compute_dtype(dtype, on_gpu)
    kv_dtype = canonical_dtype(kv_cache_dtype) if kv_cache_dtype and kv_cache_dtype != "auto" else act
    return weight_format(shape, act, quantization), kv_dtype


def weight_bytes(params: int, precision: str) -> int:
    return math.ceil(params * DTYPE_BYTES[canonical_dtype(precision)])


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str) -> int:
    """K and V, every layer, every KV head: 2 x layers x KV heads x head dim x bytes per element."""
    return int(2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * DTYPE_BYTES[canonical_dtype(kv_dtype)])


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def kv_bytes(shape: ModelShape, kv_dtype: str, tokens: int, batch: int = 1, block_size: int = 1) -> int:
    """KV cache for `batch` sequences of `tokens` each; a paged cache rounds every sequence up to whole blocks."""
    return batch * blocks_for(tokens, block_size) * block_size * kv_bytes_per_token(shape, kv_dtype)


@dataclass(frozen=True)
class MemoryPlan:
    weight_precision: str
    kv_dtype: str
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int  # at max_model_len, whole blocks
    budget_bytes: int  # gpus x memory x gpu_memory_utilization
    overhead_bytes: int
    kv_pool_bytes: int  # what is left for the KV cache; negative when the weights alone do not fit
    kv_pool_tokens: int  # whole blocks
    kv_needed_bytes: int  # max_num_seqs sequences at max_model_len
    max_seqs_at_max_model_len: int  # by memory alone

    def max_seqs_at(self, tokens: int, block_size: int) -> int:
        """Sequences of `tokens` each that the pool holds (whole blocks per sequence)."""
        per_seq = blocks_for(tokens, block_size) * block_size * self.kv_bytes_per_token
        return max(0, self.kv_pool_bytes) // per_seq


def plan_memory(shape: ModelShape, gpu: GpuSpec, *, gpus: int = 1, dtype: str = "auto",
                quantization: str | None = None, kv_cache_dtype: str | None = None, max_model_len: int,
                max_num_seqs: int, gpu_memory_utilization: float = _ENGINE.gpu_memory_utilization,
                block_size: int = _ENGINE.block_size,
                overhead_bytes: int | None = None) -> MemoryPlan:
    """Weights are sharded over `gpus` (tensor parallel), so the budget is the sum over the GPUs.
    `overhead_bytes` is per GPU (default: default_overhead_bytes)."""
    for value, what in ((gpus, "gpus"), (max_model_len, "max_model_len"), (max_num_seqs, "max_num_seqs"),
                        (block_size, "block_size")):
        if not isinstance(value, int) or value < 1:
            raise PlanError(f"{what} must be a positive integer, got {value!r}")
    if not 0 < gpu_memory_utilization <= 1:
        raise PlanError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if overhead_bytes is None:
        overhead_bytes = default_overhead_bytes(gpu.memory_bytes)
    if overhead_bytes < 0:
        raise PlanError(f"overhead must not be negative, got {overhead_bytes}")
    fmt, kv_dtype = precisions(shape, dtype, quantization, kv_cache_dtype)
    weights = fmt.bytes(shape.params)
    per_token = kv_bytes_per_token(shape, kv_dtype)
    budget = int(gpus * gpu.memory_bytes * gpu_memory_utilization)
    pool = budget - weights - gpus * overhead_bytes
    per_seq = kv_bytes(shape, kv_dtype, max_model_len, 1, block_size)
    return MemoryPlan(
        weight_precision=fmt.name, kv_dtype=kv_dtype, weight_bytes=weights, kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_seq, budget_bytes=budget, overhead_bytes=gpus * overhead_bytes,
        kv_pool_bytes=pool, kv_pool_tokens=max(0, pool) // (block_size * per_token) * block_size,
        kv_needed_bytes=max_num_seqs * per_seq,
        max_seqs_at_max_model_len=max(0, pool) // per_seq)
