"""The InferenceService status as a pure function of what the operator observed."""

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from floodway.operator.autoscaler.budget import OverflowSpend
from floodway.operator.autoscaler.history import History
from floodway.operator.autoscaler.signals import Signals
from floodway.operator.controller.adapters import CONDITION as ADAPTERS_READY
from floodway.operator.controller.adapters import ReplicaAdapters, adapter_report
from floodway.operator.controller.budget_condition import CONDITION as OVERFLOW_BUDGET
from floodway.operator.controller.budget_condition import budget_condition
from floodway.operator.controller.conditions import set_condition
from floodway.operator.controller.pods import PodProblem
from floodway.operator.spec import InferenceServiceSpec


@dataclass(frozen=True)
class Observation:
    """What one reconcile or tick saw. Counts are None when unknown (e.g. the Deployment does not exist yet)."""

    replicas: int | None = None
    ready_replicas: int | None = None
    desired_replicas: int | None = None
    gateway_ready: bool | None = None
    signals: Signals | None = None
    scale_reason: str | None = None
    scaled_at: str | None = None  # RFC 3339, set when this tick changed the replica count
    fit_level: str | None = None  # planner: "ok" | "warning" | "refuse", or "unchecked"
    fit_message: str = ""
    secret_problem: str | None = None  # why the overflow key cannot reach the gateway, if it cannot
    # None: not looked at this time (the condition keeps its last value); empty: looked, nothing wrong.
    pod_problems: tuple[PodProblem, ...] | None = None
    claim_problems: tuple[str, ...] | None = None
    conflicts: tuple[str, ...] | None = None  # rendered objects that exist and are not ours
    spend: OverflowSpend | None = None  # the autoscaler's decayed overflow spend (None: not tracked this tick)
    adapters: dict[str, ReplicaAdapters] | None = None  # ready replica -> what it said of its adapters
    history: History | None = None  # the service's traffic history (None: not looked at this time)


def now_rfc3339() -> str:
    """The clock reading the shells pass in as `now` (status and condition times are RFC 3339, UTC)."""
    return rfc3339(datetime.now(timezone.utc))


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or math.isnan(x) else round(x, digits)


def observed(signals: Signals) -> dict:
    total = signals.arrival_rate
    out = {"waiting": _round(signals.total_waiting + signals.held), "running": _round(signals.total_running),
           "kvCacheUsage": _round(sum(signals.kv_usage) / len(signals.kv_usage)) if signals.kv_usage else None,
           "sloAttainment": _round(signals.attainment), "goodput": _round(signals.goodput),
           "arrivalRate": _round(signals.arrival_rate),
           "overflowRate": _round(signals.overflow_rate / total if total > 0 else 0.0)}
    return {k: v for k, v in out.items() if v is not None}


def history_report(history: History, signals: Signals | None) -> dict:
    """status.history: what the forecast has to go on, from a history with a bucket at least."""
    out = {"since": rfc3339(datetime.fromtimestamp(history.since(), timezone.utc)), "minutes": len(history.buckets)}
    if signals is not None and signals.expected_arrival_rate > 0:
        out["expectedRequestsPerSecond"] = _round(signals.expected_arrival_rate)
    return out


def build_status(spec: InferenceServiceSpec, previous: dict, obs: Observation, now: str, generation: int | None,
                 selector: str, url: str) -> dict:
    """The new status; `previous` is the current status (its conditions keep their transition times)."""
    conds = list(previous.get("conditions") or [])
    status = {"observedGeneration": generation, "selector": selector, "url": url}
    for key, value in (("replicas", obs.replicas), ("readyReplicas", obs.ready_replicas),
                       ("desiredReplicas", obs.desired_replicas)):
        if value is not None:
            status[key] = value
    if obs.scaled_at:
        status["lastScaleTime"] = obs.scaled_at
    if obs.scale_reason:
        status["lastScaleReason"] = obs.scale_reason

    def cond(type_, state, reason, message):
        nonlocal conds
        conds = set_condition(conds, type_, state, reason, message, now, generation)

    ready, desired = obs.ready_replicas or 0, obs.desired_replicas
    if obs.ready_replicas is None and obs.gateway_ready is None:
        if not any(c["type"] == "Ready" for c in conds):  # just applied: the first tick will know more
            cond("Ready", "Unknown", "Reconciling", "objects applied; waiting for the first autoscaler tick")
    elif obs.gateway_ready is False:
        cond("Ready", "False", "GatewayNotReady", "the gateway has no ready pod")
    elif ready > 0:
        cond("Ready", "True", "ReplicasReady", f"{ready} engine replica(s) ready")
    elif desired == 0 and spec.overflow.enabled:
        cond("Ready", "True", "ScaledToZero", "no engine replica; the gateway overflows until one starts")
    else:
        cond("Ready", "False", "NoReadyReplica", "waiting for an engine replica to load the model")

    if desired is not None and obs.replicas is not None:  # unknown (just applied): leave it as it was
        if desired > ready:
            cond("Scaling", "True", "ScalingUp", f"{ready} of {desired} replicas ready")
        elif obs.replicas > desired:
            cond("Scaling", "True", "ScalingDown", f"{obs.replicas} replicas, scaling down to {desired}")
        else:
            cond("Scaling", "False", "Stable", f"{ready} of {desired} replicas ready")

    if obs.signals is not None:
        status["observed"] = observed(obs.signals)
        rate = obs.signals.overflow_rate
        if not spec.overflow.enabled:
            cond("Overflowing", "False", "OverflowDisabled", "overflow is not enabled for this service")
        elif rate > 0:
            cond("Overflowing", "True", "OverflowActive", f"{rate:.2f} requests/s sent to {spec.overflow.base_url}")
        else:
            cond("Overflowing", "False", "LocalCapacity", "all requests served locally")
        att = obs.signals.attainment
        if att is not None and att < spec.slo.attainment:
            cond("SLOAtRisk", "True", "AttainmentBelowTarget",
                 f"SLO attainment {att:.3f} < target {spec.slo.attainment:g} (TTFT {spec.slo.ttft_ms:g} ms, "
                 f"TPOT {spec.slo.tpot_ms:g} ms)")
        elif att is not None:
            cond("SLOAtRisk", "False", "AttainmentMet", f"SLO attainment {att:.3f}")
    elif "observed" in previous:
        status["observed"] = previous["observed"]

    if not spec.overflow.enabled:
        conds = [c for c in conds if c["type"] != OVERFLOW_BUDGET]
    elif obs.spend is not None and obs.spend.share.at is not None:
        cond(OVERFLOW_BUDGET, *budget_condition(spec.autoscaling.overflow_share, spec.autoscaling.priority, obs.spend,
                                                obs.signals.attainment if obs.signals else None, spec.slo.attainment))

    if obs.fit_level is not None:
        if obs.fit_level == "ok":
            cond("FitsGPU", "True", "Fits", obs.fit_message)
        elif obs.fit_level == "unchecked":
            cond("FitsGPU", "Unknown", "NotChecked", obs.fit_message)
        else:
            cond("FitsGPU", "False", "DoesNotFit" if obs.fit_level == "refuse" else "TightFit", obs.fit_message)

    if obs.pod_problems is not None:
        if obs.pod_problems:
            cond("PodsHealthy", "False", obs.pod_problems[0].reason, "; ".join(p.message for p in obs.pod_problems))
        else:
            cond("PodsHealthy", "True", "NoStuckPods", "no pod is stuck on a missing Secret, image or node")

    if not (spec.storage.model_claim or spec.storage.cache_claim):
        conds = [c for c in conds if c["type"] != "StorageAvailable"]
    elif obs.claim_problems:
        cond("StorageAvailable", "False", "ClaimUnavailable", "; ".join(obs.claim_problems))
    elif obs.claim_problems is not None:
        cond("StorageAvailable", "True", "ClaimsFound", "the PersistentVolumeClaims exist")

    if not spec.adapters:  # none (any more): the field goes too (null in the status merge patch)
        conds = [c for c in conds if c["type"] != ADAPTERS_READY]
        if previous.get("adapters") is not None:
            status["adapters"] = None
    elif obs.adapters is not None:
        report = adapter_report([a.name for a in spec.adapters], obs.adapters)
        status["adapters"] = report.replicas
        if report.condition is not None:  # no ready replica: the condition keeps what the last one said
            cond(ADAPTERS_READY, *report.condition)
    elif "adapters" in previous:
        status["adapters"] = previous["adapters"]

    if not spec.autoscaling.forecast_lead_seconds:  # no forecast (any more): the field goes too
        if previous.get("history") is not None:
            status["history"] = None
    elif obs.history is not None and obs.history.buckets:
        status["history"] = history_report(obs.history, obs.signals)
    elif "history" in previous:
        status["history"] = previous["history"]

    if obs.conflicts:
        cond("OwnershipConflict", "True", "ObjectNotOwned", "; ".join(obs.conflicts))
    elif obs.conflicts is not None:
        cond("OwnershipConflict", "False", "NoConflict", "every object is owned by this InferenceService")

    if spec.overflow.enabled:
        if obs.secret_problem:
            cond("OverflowKeyAvailable", "False", "SecretMissing", obs.secret_problem)
        elif obs.gateway_ready:
            cond("OverflowKeyAvailable", "True", "SecretMounted", "the gateway reads the overflow API key")
    else:
        conds = [c for c in conds if c["type"] != "OverflowKeyAvailable"]
    status["conditions"] = conds
    return status
