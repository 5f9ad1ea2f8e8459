"""The policies people use today, with the same decide(state, signals, policy, now) shape as ours so the
simulator can swap them. Each models the documented behaviour of the original, not its code.

- static: a fixed replica count (peak or mean provisioning).
- HPA on GPU utilisation: desired = ceil(ready x utilisation / target), 10% tolerance, scale-up at most
  max(4 pods, 100%) per 15 s sync, scale-down to the highest recommendation of the last 300 s.
- KEDA on vllm:num_requests_waiting with vLLM production-stack defaults: threshold 5 waiting (AverageValue:
  desired = ceil(total waiting / 5)), polling 15 s, cooldown 360 s (used as the scale-down window).
- Knative KPA on concurrency: desired = ceil(average concurrency over the 60 s stable window / target);
  panic when the 6 s panic window wants >= 2x the ready pods: then never below the current count until the
  panic has been over for a stable window; scale-down at most halves per tick (max-scale-down-rate 2).
"""

import math
from dataclasses import dataclass, replace

from floodway.operator.autoscaler.policy import ScaleDecision, ScalerState, remember, scaled, window
from floodway.operator.autoscaler.signals import Signals


def _bounded(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


@dataclass(frozen=True)
class StaticPolicy:
    replicas: int
    interval_seconds: float = 60.0

    def __post_init__(self):
        if self.replicas < 0:
            raise ValueError(f"static replicas must be >= 0, got {self.replicas}")


def decide_static(state: ScalerState, signals: Signals, policy: StaticPolicy, now: float) -> ScaleDecision:
    return scaled(state, now, policy.replicas, f"static {policy.replicas} replicas")


@dataclass(frozen=True)
class HpaPolicy:
    min_replicas: int = 1
    max_replicas: int = 8
    target_utilization: float = 0.8
    tolerance: float = 0.1
    interval_seconds: float = 15.0
    stabilization_s: float = 300.0


def _observed(state: ScalerState, history, now: float) -> ScalerState:
    """The state with its new history, and the time of its first observation kept (no scale-down before a
    whole window of data exists)."""
    return replace(state, history=history, observed_since=now if state.observed_since is None else state.observed_since)


def _hpa_step(state: ScalerState, ratio: float, tolerance: float, proposal: int, lo: int, hi: int,
              stabilization_s: float, now: float, reason: str) -> ScaleDecision:
    """HPA's algorithm once the metric is known: keep the count while the usage ratio is within tolerance,
    else take the proposal; scale-up rate limit, scale-down to the highest recent recommendation (and none
    before a whole window of recommendations exists)."""
    current = state.replicas
    raw = current if abs(ratio - 1) <= tolerance else proposal
    history = remember(state.history, now, raw, stabilization_s)
    st = _observed(state, history, now)
    if now - st.observed_since < stabilization_s:
        new = max(raw, current) if raw <= current else min(raw, max(current + 4, 2 * current))
    elif raw > current:
        new = min(raw, max(current + 4, 2 * current))
    else:
        new = min(current, max(int(v) for v in window(history, now, stabilization_s)))
    return scaled(st, now, _bounded(new, lo, hi), reason)


def decide_hpa(state: ScalerState, signals: Signals, policy: HpaPolicy, now: float) -> ScaleDecision:
    cur = state.replicas
    if not signals.utilization:
        return scaled(state, now, _bounded(max(cur, 1), policy.min_replicas, policy.max_replicas),
                      "no ready replica to measure")
    util = sum(signals.utilization) / len(signals.utilization)
    ratio = util / policy.target_utilization
    return _hpa_step(state, ratio, policy.tolerance, math.ceil(signals.ready * ratio), policy.min_replicas,
                     policy.max_replicas, policy.stabilization_s, now,
                     f"utilisation {util:.2f} vs target {policy.target_utilization:g}")


@dataclass(frozen=True)
class KedaPolicy:
    min_replicas: int = 1
    max_replicas: int = 8
    threshold: float = 5.0
    interval_seconds: float = 15.0
    cooldown_s: float = 360.0


def decide_keda(state: ScalerState, signals: Signals, policy: KedaPolicy, now: float) -> ScaleDecision:
    waiting = signals.total_waiting
    ratio = waiting / (policy.threshold * max(state.replicas, 1))
    return _hpa_step(state, ratio, 0.1, math.ceil(waiting / policy.threshold), policy.min_replicas,
                     policy.max_replicas, policy.cooldown_s, now,
                     f"waiting {waiting:g} vs threshold {policy.threshold:g} per replica")


@dataclass(frozen=True)
class KpaPolicy:
    target_concurrency: float = 32.0
    min_replicas: int = 1
    max_replicas: int = 8
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    max_scale_down_rate: float = 2.0
    interval_seconds: float = 2.0


def decide_kpa(state: ScalerState, signals: Signals, policy: KpaPolicy, now: float) -> ScaleDecision:
    p, cur = policy, state.replicas
    conc = signals.total_running + signals.total_waiting + signals.held
    history = remember(state.history, now, conc, p.stable_window_s)
    stable, panic = window(history, now, p.stable_window_s), window(history, now, p.panic_window_s)
    want_stable = math.ceil(sum(stable) / len(stable) / p.target_concurrency)
    want_panic = math.ceil(sum(panic) / len(panic) / p.target_concurrency)
    st = _observed(state, history, now)
    if now - st.observed_since < p.stable_window_s:
        want_stable = max(want_stable, cur)  # no decision to scale down without a full stable window of data
    if want_panic >= p.panic_threshold * max(signals.ready, 1) and want_panic > 0:
        st = replace(st, panic_until=now + p.stable_window_s)
    if now < st.panic_until:
        new = max(cur, want_panic)
        reason = f"panic: 6 s concurrency wants {want_panic}"
    else:
        new = max(want_stable, math.floor(cur / p.max_scale_down_rate))
        reason = f"stable: 60 s concurrency wants {want_stable}"
    return scaled(st, now, _bounded(new, p.min_replicas, p.max_replicas), reason)
