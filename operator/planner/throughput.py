"""How fast one replica runs a workload: the bandwidth-bound decode ceiling, the compute-bound prefill, and
the requests/s a replica sustains within the SLO. From a measured engine profile (`floodway bench engine
--profile-out`) when one is given, else from the GPU's datasheet bounds (ceilings: real engines reach less)."""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from floodway.operator.planner.gpus import GpuSpec
from floodway.operator.planner.memory import MemoryPlan
from floodway.operator.planner.model_shape import ModelShape, moe_weight_fraction
from floodway.operator.planner.units import PlanError
from floodway.operator.simulator.replica import ReplicaProfile

# The fields `floodway bench engine --profile-out` always writes; the simulator reads the same file.
REQUIRED_PROFILE_FIELDS = ("model", "prefill_tokens_per_s", "decode_step_s", "kv_capacity_tokens", "max_num_seqs")


def load_profile(path: str) -> tuple[ReplicaProfile, dict]:
    """(the profile as the simulator loads it, the raw JSON). Strict about the measured fields: a plan built
    on the simulator's defaults would mislead."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise PlanError(f"profile {path}: cannot read: {e}") from e
    if not isinstance(data, dict):
        raise PlanError(f"profile {path}: not a JSON object")
    missing = [k for k in REQUIRED_PROFILE_FIELDS if k not in data]
    if missing:
        raise PlanError(f"profile {path}: missing {', '.join(missing)} "
                        "(written by `floodway bench engine --profile-out`)")
    try:
        return ReplicaProfile.from_json(path), data
    except (TypeError, ValueError, AttributeError) as e:
        raise PlanError(f"profile {path}: {e}") from None


def decode_ceiling_tokens_per_s(bandwidth_bytes_per_s: float, weight_bytes: int) -> float:
    """Batch 1 decode reads every weight once per token, so it cannot beat bandwidth / weight bytes."""
    return bandwidth_bytes_per_s / weight_bytes


@dataclass(frozen=True)
class Speed:
    source: str  # "profile" or "bounds"
    prefill_tokens_per_s: float
    step_s: Callable[[int], float]  # decode step time at a batch size
    # The profile's own limit on concurrent sequences of a given length (its KV pool and max_num_seqs).
    batch_cap: Callable[[int], int] | None = None


def profile_speed(profile: ReplicaProfile, context_tokens: int) -> Speed:
    """A step as the simulator times it: the measured step at that batch plus reading each sequence's KV."""
    return Speed("profile", profile.prefill_tokens_per_s,
                 lambda b: profile.decode_step(b) + b * context_tokens * profile.decode_s_per_kv_token,
                 lambda tokens: min(profile.max_num_seqs, profile.kv_capacity_tokens // tokens))


def bound_speed(shape: ModelShape, mem: MemoryPlan, gpu: GpuSpec, gpus: int, context_tokens: int) -> Speed | None:
    """Roofline: a decode step reads the weights (the touched experts for MoE) plus every sequence's KV at the
    average context, or spends 2 FLOPs per active parameter per token, whichever takes longer. Prefill is
    compute-bound (attention FLOPs left out: small next to the weights at ordinary prompt lengths)."""
    if gpu.bandwidth_bytes_per_s is None or gpu.bf16_flops is None:
        return None
    bandwidth, flops = gpus * gpu.bandwidth_bytes_per_s, gpus * gpu.bf16_flops

    def step_s(batch: int) -> float:
        read = mem.weight_bytes * moe_weight_fraction(shape, batch) + batch * context_tokens * mem.kv_bytes_per_token
        return max(read / bandwidth, 2 * shape.active_params * batch / flops)

    return Speed("bounds", flops / (2 * shape.active_params), step_s)


@dataclass(frozen=True)
class Capacity:
    source: str
    batch: int  # concurrent sequences per replica
    limited_by: str
    step_s: float
    ttft_s: float  # its own prefill alone (no queueing): a lower bound
    tpot_s: float  # decode step plus its share of the other sequences' prefills
    requests_per_s: float
    output_tokens_per_s: float
    meets_ttft: bool | None
    meets_tpot: bool | None


def replica_capacity(speed: Speed, prompt_tokens: int, output_tokens: int, max_batch: int, limited_by: str,
                     slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> Capacity:
    """Steady state at saturation: per request the replica spends prompt/prefill_rate on its prefill and
    output x step(B)/B on its share of B-wide decode steps, so a replica serves 1/(that) requests/s, and a
    sequence sees TPOT = step(B) + B x prefill/output (the prefills that interleave with its decode).
    B is the largest concurrency within max_batch (and the profile's limit) that meets the TPOT SLO."""
    if prompt_tokens < 1 or output_tokens < 1:
        raise PlanError(f"prompt and output tokens must be >= 1, got {prompt_tokens} and {output_tokens}")
    cap = speed.batch_cap(prompt_tokens + output_tokens) if speed.batch_cap else None
    if cap is not None and cap < max_batch:
        max_batch, limited_by = cap, "the profiled engine's KV capacity or max_num_seqs"
    if max_batch < 1:
        raise PlanError(f"not even one sequence of {prompt_tokens + output_tokens} tokens fits ({limited_by})")
    prefill_s = prompt_tokens / speed.prefill_tokens_per_s

    def tpot(b: int) -> float:
        return speed.step_s(b) + b * prefill_s / output_tokens

    batch = max_batch
    if slo_tpot_s is not None and tpot(batch) > slo_tpot_s:
        lo, hi = 1, batch  # tpot grows with b: the largest b meeting the SLO
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if tpot(mid) <= slo_tpot_s else (lo, mid - 1)
        batch, limited_by = lo, "TPOT SLO"
    step = speed.step_s(batch)
    rps = 1 / (prefill_s + output_tokens * step / batch)
    return Capacity(
        source=speed.source, batch=batch, limited_by=limited_by, step_s=step, ttft_s=prefill_s,
        tpot_s=tpot(batch), requests_per_s=rps, output_tokens_per_s=rps * output_tokens,
        meets_ttft=None if slo_ttft_s is None else prefill_s <= slo_ttft_s,
        meets_tpot=None if slo_tpot_s is None else tpot(batch) <= slo_tpot_s)


def replicas_for(rate: float, capacity: Capacity) -> int:
    if rate < 0:
        raise PlanError(f"rate must not be negative, got {rate}")
    return math.ceil(rate / capacity.requests_per_s)
