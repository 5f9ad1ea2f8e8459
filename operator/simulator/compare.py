"""Policies side by side on one trace: the same replica model, cold start and gateway for each.

Static peak is the smallest fixed pool that meets the attainment target on the trace without overflow
(found by simulation); static mean scales it by mean / peak arrival rate over 60 s windows. Dynamic policies
all start warm with the replicas the first minute's rate needs (the same count for each).
"""

import math
from dataclasses import dataclass, replace

from floodway.operator.autoscaler import baselines as bl
from floodway.operator.autoscaler.policy import AutoscalerPolicy, decide
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, SimResult, simulate
from floodway.operator.simulator.report import summarize
from floodway.operator.simulator.traces import TraceRequest, rate_stats

POLICIES = ("floodway", "floodway-reactive", "static-peak", "static-mean", "hpa", "keda", "kpa")
OVERFLOW_SUFFIX = "+overflow"


@dataclass(frozen=True)
class Sizing:
    static_peak: int
    static_mean: int
    initial: int
    max_replicas: int


def overflow_enabled(cfg: SimConfig, enabled: bool) -> SimConfig:
    """The same simulation with the gateway's overflow switched on or off (its other settings kept)."""
    return replace(cfg, overflow=replace(cfg.overflow, enabled=enabled))


def parse_policy(spec: str) -> tuple[str, bool]:
    """'keda' or 'keda+overflow' -> (name, with overflow)."""
    name, with_overflow = spec, False
    if spec.endswith(OVERFLOW_SUFFIX):
        name, with_overflow = spec[: -len(OVERFLOW_SUFFIX)], True
    if name not in POLICIES:
        raise ValueError(f"unknown policy {spec!r}; choose from {', '.join(POLICIES)} (optionally +overflow)")
    return name, with_overflow


def static_peak_replicas(trace: list[TraceRequest], cfg: SimConfig, attainment: float, limit: int = 256) -> int:
    """Smallest static pool meeting `attainment` without overflow (binary search; attainment grows with N)."""
    cfg = overflow_enabled(cfg, False)

    def ok(n: int) -> bool:
        res = simulate(trace, Scaler("static", bl.decide_static, bl.StaticPolicy(n), n), cfg)
        return summarize(res).attainment >= attainment
    hi = 1
    while not ok(hi):
        if hi >= limit:
            raise ValueError(f"no static pool up to {limit} replicas meets attainment {attainment:g}")
        hi = min(hi * 2, limit)
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def size(trace: list[TraceRequest], cfg: SimConfig, attainment: float, peak_n: int | None = None) -> Sizing:
    """Pool sizes for the baselines; peak_n given skips the search for static peak."""
    if peak_n is not None and peak_n < 1:
        raise ValueError(f"static peak must be >= 1 replica, got {peak_n}")
    peak_n = peak_n or static_peak_replicas(trace, cfg, attainment)
    mean, peak = rate_stats(trace, 60.0)
    first = sum(1 for r in trace if r.arrival_s < 60.0) / 60.0
    return Sizing(peak_n, max(1, math.ceil(peak_n * mean / peak)), max(1, math.ceil(peak_n * first / peak)),
                  max(8, 2 * peak_n))


def build(name: str, sizing: Sizing, ours: AutoscalerPolicy, kpa_target: float) -> Scaler:
    lo, hi, init = ours.replicas_min, sizing.max_replicas, max(sizing.initial, ours.replicas_min)
    if name in ("floodway", "floodway-reactive"):  # reactive: ours without the history's forecast
        lead = ours.forecast_lead_seconds if name == "floodway" else 0.0
        return Scaler(name, decide, replace(ours, replicas_max=hi, forecast_lead_seconds=lead), init)
    if name == "static-peak":
        return Scaler(name, bl.decide_static, bl.StaticPolicy(sizing.static_peak), sizing.static_peak)
    if name == "static-mean":
        return Scaler(name, bl.decide_static, bl.StaticPolicy(sizing.static_mean), sizing.static_mean)
    lo = max(lo, 1)
    if name == "hpa":
        return Scaler(name, bl.decide_hpa, bl.HpaPolicy(lo, hi), init)
    if name == "keda":
        return Scaler(name, bl.decide_keda, bl.KedaPolicy(lo, hi), init)
    return Scaler(name, bl.decide_kpa, bl.KpaPolicy(kpa_target, lo, hi), init)


def run(trace: list[TraceRequest], specs: list[str], cfg: SimConfig, ours: AutoscalerPolicy,
        sizing: Sizing | None = None) -> tuple[Sizing, list[SimResult]]:
    """Simulate each policy spec ('kpa', 'floodway+overflow', ...); the overflow settings come from cfg."""
    parsed = [parse_policy(s) for s in specs]
    sizing = sizing or size(trace, cfg, ours.slo_attainment)
    results = []
    for (name, with_overflow), spec in zip(parsed, specs, strict=True):
        run_cfg = overflow_enabled(cfg, with_overflow)
        # The overflow budget is only ours to spend where the gateway overflows.
        policy = ours if with_overflow else replace(ours, overflow_share=0.0)
        scaler = build(name, sizing, policy, ours.per_replica)
        results.append(simulate(trace, replace(scaler, name=spec), run_cfg))
    return sizing, results
