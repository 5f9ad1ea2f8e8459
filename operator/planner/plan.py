"""`floodway plan` as data: every figure of a plan in one JSON-ready dict, from the same functions that back
the operator's fit check. The CLI prints it as text or JSON; nothing here prints."""

from dataclasses import asdict, dataclass

from floodway.operator.planner.cost import cost_plan
from floodway.operator.planner.fit import assess_fit, default_max_model_len
from floodway.operator.planner.gpus import resolve_gpu
from floodway.operator.planner.memory import DTYPE_BYTES, kv_bytes, plan_memory, precisions, weight_bytes
from floodway.operator.planner.model_shape import load_shape
from floodway.operator.planner.throughput import (
    bound_speed,
    decode_ceiling_tokens_per_s,
    load_profile,
    profile_speed,
    replica_capacity,
    replicas_for,
)
from floodway.operator.planner.units import GIB, PlanError
from floodway.operator.spec.models import EngineSpec

_ENGINE = EngineSpec()  # the spec's engine defaults are the planner's

# Defaults near the Azure 2023 conversation trace (median input 1,020 tokens, mean output 211).
DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS = 1024, 256


@dataclass
class PlanRequest:
    model: str
    params: float | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_bandwidth_gbs: float | None = None
    gpu_tflops: float | None = None
    gpus: int = 1
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int = _ENGINE.max_num_seqs
    gpu_memory_utilization: float = _ENGINE.gpu_memory_utilization
    block_size: int = _ENGINE.block_size
    overhead_gib: float | None = None  # per GPU; None: max(1 GiB, 5% of the GPU), as the engine keeps
    rate: float | None = None
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    api_price_in: float | None = None
    api_price_out: float | None = None
    gpu_price_per_hour: float | None = None
    profile: str | None = None


def make_plan(req: PlanRequest) -> dict:
    if req.prompt_tokens < 1 or req.output_tokens < 1:
        raise PlanError(f"--prompt-tokens and --output-tokens must be >= 1, got {req.prompt_tokens}, "
                        f"{req.output_tokens}")
    if req.overhead_gib is not None and req.overhead_gib < 0:
        raise PlanError(f"--overhead-gib must not be negative, got {req.overhead_gib}")
    shape = load_shape(req.model, req.params)
    gpu = resolve_gpu(req.gpu, req.gpu_memory, req.gpu_bandwidth_gbs, req.gpu_tflops)
    profile, raw = load_profile(req.profile) if req.profile else (None, {})
    max_model_len = req.max_model_len or default_max_model_len(shape)
    seq_tokens = req.prompt_tokens + req.output_tokens
    if seq_tokens > max_model_len:
        raise PlanError(f"the expected request ({req.prompt_tokens} prompt + {req.output_tokens} output tokens) "
                        f"exceeds max_model_len {max_model_len}: the engine would reject it")
    # "auto" means bfloat16 unless the only hardware we know of is the CPU a profile was measured on.
    on_gpu = gpu is not None or not str(raw.get("device", "cuda")).startswith("cpu")
    weights, kv_dtype = precisions(shape, req.dtype, req.quantization, req.kv_cache_dtype, on_gpu)
    notes = []
    if shape.active_params != shape.params:
        notes.append(f"mixture of experts: {shape.active_params:,} parameters active per token")
    plan = {
        "model": asdict(shape),
        "weights": {"precision": weights.name, "bytes": weights.bytes(shape.params),
                    "by_precision": {p: weight_bytes(shape.params, p) for p in DTYPE_BYTES}},
        "kv": {"dtype": kv_dtype, "bytes_per_token": kv_bytes(shape, kv_dtype, 1),
               "bytes_per_sequence_at_max_model_len": kv_bytes(shape, kv_dtype, max_model_len, 1, req.block_size),
               "bytes_per_sequence_at_expected": kv_bytes(shape, kv_dtype, seq_tokens, 1, req.block_size),
               "max_model_len": max_model_len, "expected_tokens": seq_tokens, "block_size": req.block_size},
        "gpu": None, "pool": None, "fit": None, "throughput": None, "cost": None, "notes": notes,
    }
    context_tokens = req.prompt_tokens + req.output_tokens // 2  # a decoding sequence's average context
    max_batch, limited_by, speed = req.max_num_seqs, "maxNumSeqs", None
    if gpu is not None:
        max_batch, limited_by, speed = _gpu_sections(plan, req, shape, gpu, max_model_len, context_tokens)
    if profile is not None:
        speed = profile_speed(profile, context_tokens)
        measured_at = raw.get("decode_context_tokens")
        notes.append("profile step model (shared with `floodway simulate`): the measured step at the batch size"
                     + (f" (measured at {measured_at} context tokens; this workload averages {context_tokens})"
                        if measured_at else "")
                     + f", plus {profile.decode_s_per_kv_token:.3g} s per context token read")
        if profile.model != req.model:
            notes.append(f"the profile was measured on model {profile.model!r}, not {req.model!r}")
    if speed is not None:
        gpu_price = req.gpu_price_per_hour
        if gpu_price is None and gpu is not None and gpu.price_per_hour is not None:
            gpu_price = gpu.price_per_hour
            notes.append(f"GPU price ${gpu_price:g}/hour: the table's indicative on-demand price for {gpu.name} "
                         "(gpus.yaml); --gpu-price-per-hour sets yours")
        _throughput_sections(plan, req, speed, max_batch, limited_by, on_gpu, gpu_price)
    return plan


def _gpu_sections(plan: dict, req: PlanRequest, shape, gpu, max_model_len: int, context_tokens: int):
    """Pool, fit and decode ceiling on the GPU; returns (batch limit, what limits it, bound speed or None)."""
    mem = plan_memory(shape, gpu, gpus=req.gpus, dtype=req.dtype, quantization=req.quantization,
                      kv_cache_dtype=req.kv_cache_dtype, max_model_len=max_model_len, max_num_seqs=req.max_num_seqs,
                      gpu_memory_utilization=req.gpu_memory_utilization, block_size=req.block_size,
                      overhead_bytes=None if req.overhead_gib is None else int(req.overhead_gib * GIB))
    fit = assess_fit(shape, mem, gpu, req.gpus, max_model_len, req.max_num_seqs, req.gpu_memory_utilization,
                     req.block_size)
    at_expected = mem.max_seqs_at(req.prompt_tokens + req.output_tokens, req.block_size)
    plan["gpu"] = {**asdict(gpu), "count": req.gpus}
    plan["pool"] = {"budget_bytes": mem.budget_bytes, "overhead_bytes": mem.overhead_bytes,
                    "kv_pool_bytes": mem.kv_pool_bytes, "kv_pool_tokens": mem.kv_pool_tokens,
                    "kv_needed_for_max_num_seqs_bytes": mem.kv_needed_bytes,
                    "max_seqs_at_max_model_len": mem.max_seqs_at_max_model_len,
                    "max_seqs_at_expected": at_expected, "max_num_seqs": req.max_num_seqs}
    plan["fit"] = {"level": fit.level, "message": fit.message}
    if gpu.bandwidth_bytes_per_s is not None:
        plan["decode_ceiling_batch1_tokens_per_s"] = decode_ceiling_tokens_per_s(
            req.gpus * gpu.bandwidth_bytes_per_s, mem.weight_bytes)
    speed = bound_speed(shape, mem, gpu, req.gpus, context_tokens) if fit.level != "refuse" else None
    if at_expected < req.max_num_seqs:
        return at_expected, "KV cache", speed
    return req.max_num_seqs, "maxNumSeqs", speed


def _throughput_sections(plan: dict, req: PlanRequest, speed, max_batch: int, limited_by: str,
                         gpus_known: bool, gpu_price: float | None) -> None:
    capacity = replica_capacity(
        speed, req.prompt_tokens, req.output_tokens, max_batch, limited_by,
        slo_ttft_s=req.slo_ttft_ms / 1000 if req.slo_ttft_ms else None,
        slo_tpot_s=req.slo_tpot_ms / 1000 if req.slo_tpot_ms else None)
    replicas = replicas_for(req.rate, capacity) if req.rate is not None else None
    plan["notes"].append(
        "throughput from the measured profile" if speed.source == "profile" else
        "throughput from datasheet bounds (bandwidth and FLOP/s ceilings): real engines reach less, so the "
        "replica count is a lower bound; measure with `floodway bench engine --profile-out`")
    plan["throughput"] = {**asdict(capacity), "prefill_tokens_per_s": speed.prefill_tokens_per_s,
                          "rate": req.rate, "replicas": replicas,
                          "gpus_total": replicas * req.gpus if replicas is not None and gpus_known else None}
    if gpu_price is not None:
        plan["cost"] = asdict(cost_plan(
            gpu_price, req.gpus, capacity.requests_per_s, req.prompt_tokens, req.output_tokens,
            rate=req.rate, replicas=replicas, api_price_in=req.api_price_in, api_price_out=req.api_price_out))
    elif req.api_price_in is not None or req.api_price_out is not None:
        plan["notes"].append("no --gpu-price-per-hour: cost not compared")
