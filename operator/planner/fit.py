"""The admission check: do the weights plus the KV cache for maxNumSeqs x maxModelLen fit the GPUs asked for?

`check_fit` is pure apart from reading the model's config.json (local, offline); the operator calls it for
each InferenceService, `floodway up` and `floodway plan` print its message. Levels: "ok"; "warning" (runs, but
fewer sequences fit at full length than maxNumSeqs, or maxModelLen exceeds the model's positions, or the fit
could not be checked for a GPU we do not know); "refuse" (the weights, or one sequence at maxModelLen, do not fit).
"""

from dataclasses import dataclass, field

from floodway.operator.planner.gpus import GpuSpec, find_gpu, resolve_gpu
from floodway.operator.planner.memory import MemoryPlan, plan_memory
from floodway.operator.planner.model_shape import ModelShape, load_shape, shape_from_config
from floodway.operator.planner.units import GIB, ConfigNotFound, PlanError
from floodway.operator.spec.models import EngineSpec

_ENGINE = EngineSpec()  # the spec's engine defaults are the planner's

DEFAULT_MAX_MODEL_LEN = 4096  # the engine's default cap: min(model's max positions, this)


@dataclass(frozen=True)
class FitResult:
    level: str  # "ok" | "warning" | "refuse"
    message: str
    details: dict = field(default_factory=dict)


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def default_max_model_len(shape: ModelShape) -> int:
    return min(shape.max_position_embeddings or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)


def assess_fit(shape: ModelShape, mem: MemoryPlan, gpu: GpuSpec, gpus: int, max_model_len: int, max_num_seqs: int,
               gpu_memory_utilization: float, block_size: int) -> FitResult:
    """Pure: the verdict and its numbers from a memory plan."""
    where = f"{gpus} x {gpu.name} ({_gib(gpu.memory_bytes)} each) at gpuMemoryUtilization {gpu_memory_utilization}"
    details = dict(checked=True, gpu=gpu.name, gpus=gpus, weight_precision=mem.weight_precision,
                   weight_bytes=mem.weight_bytes, kv_bytes_per_token=mem.kv_bytes_per_token,
                   kv_bytes_per_sequence=mem.kv_bytes_per_sequence, budget_bytes=mem.budget_bytes,
                   kv_pool_bytes=mem.kv_pool_bytes, kv_needed_bytes=mem.kv_needed_bytes,
                   max_seqs_at_max_model_len=mem.max_seqs_at_max_model_len, max_model_len=max_model_len,
                   max_num_seqs=max_num_seqs, params=shape.params, params_source=shape.params_source)
    if mem.kv_pool_bytes < mem.kv_bytes_per_token * block_size:
        return FitResult("refuse", (
            f"the {mem.weight_precision} weights ({_gib(mem.weight_bytes)}) leave no room for a KV cache on {where} "
            f"(budget {_gib(mem.budget_bytes)}, {_gib(mem.overhead_bytes)} kept for activations and runtime): "
            "use more or larger GPUs, or quantize the weights"), details)
    # Longest sequence the pool holds alone, and the longest that lets maxNumSeqs run at once.
    longest = mem.kv_pool_tokens
    len_for_all = mem.kv_pool_tokens // max_num_seqs // block_size * block_size
    details.update(longest_sequence_tokens=longest, max_model_len_for_max_num_seqs=len_for_all)
    if mem.max_seqs_at_max_model_len < 1:
        return FitResult("refuse", (
            f"not even one sequence at maxModelLen {max_model_len} fits: it needs "
            f"{_gib(mem.kv_bytes_per_sequence)} of KV cache, but after the weights ({_gib(mem.weight_bytes)}) "
            f"{where} leaves {_gib(mem.kv_pool_bytes)} ({longest} tokens); lower maxModelLen to {longest} or less, "
            "or use more or larger GPUs"), details)
    warnings = []
    if shape.max_position_embeddings and max_model_len > shape.max_position_embeddings:
        warnings.append(f"maxModelLen {max_model_len} exceeds the model's {shape.max_position_embeddings} positions")
    if mem.max_seqs_at_max_model_len < max_num_seqs:
        fix = f"lower maxNumSeqs to {mem.max_seqs_at_max_model_len}"
        if len_for_all >= block_size:
            fix += f", or maxModelLen to {len_for_all} to keep maxNumSeqs {max_num_seqs}"
        warnings.append(
            f"the KV cache for maxNumSeqs {max_num_seqs} x maxModelLen {max_model_len} needs "
            f"{_gib(mem.kv_needed_bytes)} but {where} leaves {_gib(mem.kv_pool_bytes)} after the weights "
            f"({_gib(mem.weight_bytes)}): only {mem.max_seqs_at_max_model_len} sequences fit at full length and "
            f"the engine queues or preempts the rest; {fix}, or add GPUs")
    if warnings:
        return FitResult("warning", "; ".join(warnings), details)
    return FitResult("ok", (
        f"fits: {mem.weight_precision} weights {_gib(mem.weight_bytes)} + KV for {max_num_seqs} x {max_model_len} "
        f"tokens {_gib(mem.kv_needed_bytes)} within {_gib(mem.budget_bytes - mem.overhead_bytes)} on {where}; "
        f"the pool holds {mem.max_seqs_at_max_model_len} sequences at full length"), details)


def _unchecked(message: str) -> FitResult:
    return FitResult("ok", f"fit not checked: {message}", {"checked": False})


def check_fit(model: str, *, dtype: str = _ENGINE.dtype, max_model_len: int | None = None,
              max_num_seqs: int = _ENGINE.max_num_seqs, gpu_memory_utilization: float = _ENGINE.gpu_memory_utilization,
              gpus: int = 1, gpu_type: str | None = None,
              gpu_memory: str | int | None = None, quantization: str | None = None,
              kv_cache_dtype: str | None = None, block_size: int = _ENGINE.block_size, params: float | None = None,
              overhead_bytes: int | None = None, config: dict | None = None) -> FitResult:
    """The operator's admission check for an InferenceService. `gpu_memory` (bytes or "80Gi") overrides the
    memory of `gpu_type`; either sizes the GPU. A bad setting refuses with the reason; a model whose config
    is not available locally, or a GPU we cannot size, is reported as not checked rather than refused.
    `config`: config.json fields given instead of reading the model's file (an InferenceService's modelShape)."""
    if gpus == 0:
        return _unchecked("no GPU requested (the CPU engine sizes its KV cache from a byte budget)")
    if gpu_type is None and gpu_memory is None:
        return _unchecked("no GPU type or GPU memory given")
    if gpu_memory is None and find_gpu(gpu_type) is None:
        return FitResult("warning", f"fit not checked: unknown GPU type {gpu_type!r}; give the GPU memory "
                                    "(for example 48Gi) to check it", {"checked": False})
    try:
        shape = shape_from_config(config, model, "spec.modelShape", params) if config else load_shape(model, params)
        gpu = resolve_gpu(gpu_type if gpu_type and find_gpu(gpu_type) else None, gpu_memory)
        max_model_len = max_model_len or default_max_model_len(shape)
        mem = plan_memory(shape, gpu, gpus=gpus, dtype=dtype, quantization=quantization,
                          kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                          gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
                          overhead_bytes=overhead_bytes)
    except ConfigNotFound as e:
        return _unchecked(str(e))
    except PlanError as e:
        return FitResult("refuse", str(e), {"checked": False})
    return assess_fit(shape, mem, gpu, gpus, max_model_len, max_num_seqs, gpu_memory_utilization, block_size)



def spec_fit(spec) -> tuple[str, str]:
    """check_fit for an InferenceService spec: ("ok" | "warning" | "refuse" | "unchecked", message).

    The operator's FitsGPU condition and `floodway up` both call this, so they agree."""
    e, r, shape = spec.engine, spec.resources, spec.model_shape
    gpu_memory = f"{r.gpu_memory_gib}Gi" if r.gpu_memory_gib else None
    claim = spec.storage.model_claim
    if shape is None and claim is not None and r.gpus:
        return "unchecked", (f"fit not checked: the model is on PersistentVolumeClaim {claim.name}, which the "
                             f"operator does not read; {_GIVE_SHAPE}")
    try:
        result = check_fit(spec.model, dtype=e.dtype, max_model_len=e.max_model_len, max_num_seqs=e.max_num_seqs,
                           gpu_memory_utilization=e.gpu_memory_utilization, gpus=r.gpus, gpu_type=r.gpu_type,
                           gpu_memory=gpu_memory, quantization=e.quantization, block_size=e.block_size,
                           params=shape.params if shape else None,
                           config=shape.config() if shape else None)
    except Exception as exc:  # the fit check is advice: its failure must not block serving
        return "unchecked", f"fit not checked: {exc}"
    if result.details.get("checked") is False:
        hint = f"; {_GIVE_SHAPE}" if "no config.json" in result.message else ""
        return "unchecked", result.message + hint
    return result.level, (f"from spec.modelShape: {result.message}" if shape else result.message)


_GIVE_SHAPE = ("give spec.modelShape (hiddenSize, numLayers, numHeads, numKvHeads, vocabSize, params from the "
               "model's config.json) to check it")
