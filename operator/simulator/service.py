"""The InferenceService a simulation stands for. The simulator builds the spec a user would apply (SLO, bounds,
the autoscaler's capacity from the replica profile, overflow on) and derives our policy and the gateway's
overflow rule from it through the operator's own functions: `controller.scaling.autoscaler_policy`, and the
gateway config `render.gateway` renders, read by `GatewayConfig.overflow_policy` as the gateway reads it. So the
simulator runs on the defaults a cluster ships, and a figure it prints holds for the spec it prints."""

from floodway.operator.autoscaler.policy import AutoscalerPolicy
from floodway.operator.controller.scaling import autoscaler_policy
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.render.gateway import gateway_config
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.spec import InferenceServiceSpec

# The simulated service's replicas.max.
MAX_REPLICAS = 8
# The simulated external API (gateway.py answers for it); the gateway config needs an address and a key.
SIMULATED_API = {"enabled": True, "baseURL": "http://overflow.simulated/v1",
                 "apiKeySecretRef": {"name": "simulated", "key": "api-key"}}


def capacity_fields(profile: ReplicaProfile, tpot_slo_s: float) -> dict:
    """The spec's autoscaling capacity from an engine profile (`floodway simulate --profile FILE` prints it). At
    least one sequence: where even one misses the TPOT SLO (0 in the spec would mean "unknown"), a replica is
    sized for one request at a time."""
    return {"prefillTokensPerSecond": round(profile.prefill_tokens_per_s, 1),
            "decodeSequences": max(1, profile.decode_sequences(tpot_slo_s))}


def simulated_spec(profile: ReplicaProfile, ttft_slo_s: float, tpot_slo_s: float, cold_start_s: float,
                   attainment: float,
                   target_concurrency: float | None = None, scale_to_zero_s: float | None = None,
                   max_waiting_per_replica: float | None = None, gpu_hourly_price: float | None = None,
                   api_price_in: float | None = None, api_price_out: float | None = None,
                   overflow_share: float | None = None, priority: str | None = None, classes: list[dict] | None = None,
                   tenant_limits: dict | None = None) -> InferenceServiceSpec:
    """The spec of the simulated service; None settings keep the spec's defaults; the forecast looks a cold start
    ahead. Its replicas run on the
    profile's GPU type, whose table price holds unless `gpu_hourly_price` is given. `classes`: spec.classes;
    `tenant_limits`: gateway.tenants.default (camelCase fields). With classes the engines schedule by priority
    (engine.schedulingPolicy priority), as the tenants guide sets them up."""
    overflow = {**SIMULATED_API, "pricing": {"inputPerMillionTokens": api_price_in,
                                             "outputPerMillionTokens": api_price_out}}
    if max_waiting_per_replica is not None:
        overflow["maxWaitingPerReplica"] = max_waiting_per_replica
    autoscaling = {**capacity_fields(profile, tpot_slo_s), "forecastLeadSeconds": cold_start_s}
    if target_concurrency is not None:
        autoscaling["targetConcurrency"] = target_concurrency
    if scale_to_zero_s is not None:
        autoscaling["scaleToZeroAfterSeconds"] = scale_to_zero_s
    if overflow_share is not None:
        autoscaling["overflowShare"] = overflow_share
    if priority is not None:
        autoscaling["priority"] = priority
    return InferenceServiceSpec.model_validate({
        "model": profile.model,
        "engine": {"maxNumSeqs": profile.max_num_seqs, "maxNumBatchedTokens": profile.max_num_batched_tokens,
                   "schedulingPolicy": "priority" if classes else "fcfs"},
        "resources": {"gpuType": profile.gpu, "gpuHourlyPrice": gpu_hourly_price},
        "replicas": {"min": 0 if scale_to_zero_s is not None else 1, "max": MAX_REPLICAS},
        "slo": {"ttftMs": ttft_slo_s * 1000, "tpotMs": tpot_slo_s * 1000, "attainment": attainment},
        "autoscaling": autoscaling, "overflow": overflow, "classes": classes or [],
        "gateway": {"tenants": {"default": tenant_limits or {}}}})


def gateway_settings(spec: InferenceServiceSpec) -> GatewayConfig:
    """The gateway config the operator renders for this spec, as the gateway reads it."""
    return GatewayConfig.model_validate(gateway_config(spec, {"static": []}, port=0))


def policies(spec: InferenceServiceSpec) -> tuple[AutoscalerPolicy, OverflowPolicy]:
    """Our autoscaler's policy and the gateway's overflow rule for this spec, as the operator and gateway get them."""
    return autoscaler_policy(spec), gateway_settings(spec).overflow_policy()
