"""Floodway's autoscaling policy: a pure function of (state, signals, policy, clock).

Demand is the concurrency the service must hold: requests running and waiting on the engines, held in the
gateway, and the concurrency sent to the overflow API (overflow rate x observed service time, Little's law),
so overflow is paid back by local replicas instead of hiding the shortage. Replicas are sized so that each
holds at most `target_concurrency` (and KV usage at most `kv_target`):
- scale up on the demand averaged over `scale_up_window_s`, at most `max_step_up` replicas per decision;
- SLO feedback: attainment below target while requests queue or overflow adds a replica (when none is
  still starting, so a cold start is not answered by piling up more);
- panic: demand >= `panic_threshold` x the ready replicas' capacity jumps at once and blocks scale-down for
  `panic_hold_s`; the first request seen while at zero replicas scales to one at once;
- scale down only when no panic, attainment is at target, and the peak demand of the last
  `scale_down_stabilization_s` fits the smaller pool at `scale_down_utilization` of its capacity,
  at most `max_step_down` replicas per decision and `scale_down_interval_s` after the last change (in-flight
  counts grow as a pool shrinks, since each replica's batch and latency grow: look before the next step);
- bounds; with min_replicas 0, scale to zero after `scale_to_zero_after_s` without any demand (None: never).
Defaults come from the simulator runs in the README (`floodway simulate`).
"""

import math
from dataclasses import dataclass, replace

from floodway.operator.autoscaler.signals import Signals


@dataclass(frozen=True)
class AutoscalerPolicy:
    min_replicas: int = 1
    max_replicas: int = 8
    interval_s: float = 5.0
    target_concurrency: float = 32.0  # requests in flight per replica at which it still meets the SLO
    kv_target: float = 0.85
    slo_attainment: float = 0.99
    scale_up_window_s: float = 60.0
    max_step_up: int = 4
    panic_threshold: float = 2.0
    panic_hold_s: float = 60.0
    scale_down_stabilization_s: float = 180.0
    scale_down_utilization: float = 0.7
    max_step_down: int = 1
    scale_down_interval_s: float = 30.0  # between two changes before a scale-down: see the smaller pool's load
    scale_to_zero_after_s: float | None = None
    assumed_request_s: float = 10.0  # service time assumed for overflowed demand before any is observed

    def __post_init__(self):
        problems = []
        if self.min_replicas < 0 or self.max_replicas < max(self.min_replicas, 1):
            problems.append(f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1 "
                            f"(got {self.min_replicas}, {self.max_replicas})")
        for name in ("interval_s", "target_concurrency", "kv_target", "panic_threshold", "scale_down_utilization",
                     "assumed_request_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if self.max_step_up < 1 or self.max_step_down < 1:
            problems.append("max_step_up and max_step_down must be >= 1")
        if not 0 < self.slo_attainment <= 1:
            problems.append("slo_attainment must be in (0, 1]")
        if problems:
            raise ValueError("bad autoscaler policy: " + "; ".join(problems))


@dataclass(frozen=True)
class ScalerState:
    """What a policy remembers between ticks (shared by all policies in this package)."""

    replicas: int  # the last desired replica count
    last_scale_time: float | None = None
    panic_until: float = -math.inf
    history: tuple[tuple[float, float], ...] = ()  # (time, observed demand) within the longest window
    last_busy: float | None = None  # last time demand was seen (None: never)
    observed_since: float | None = None  # first tick: no scale-down before a full window was observed


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str
    state: ScalerState  # pass to the next decide()


def remember(history, now: float, value: float, keep_s: float) -> tuple[tuple[float, float], ...]:
    return tuple((t, v) for t, v in history if t > now - keep_s) + ((now, value),)


def window(history, now: float, span_s: float) -> list[float]:
    return [v for t, v in history if t > now - span_s]


def scaled(state: ScalerState, now: float, replicas: int, reason: str, **changes) -> Decision:
    """A Decision that records the scale time when the count changes."""
    moved = replicas != state.replicas
    new = replace(state, replicas=replicas, last_scale_time=now if moved else state.last_scale_time, **changes)
    return Decision(replicas, reason if moved else f"hold: {reason}", new)


def demand_of(signals: Signals, assumed_request_s: float) -> float:
    service_s = assumed_request_s
    if signals.finished_rate > 0 and signals.total_running > 0:
        service_s = signals.total_running / signals.finished_rate
    return signals.total_running + signals.total_waiting + signals.held + signals.overflow_rate * service_s


def decide(state: ScalerState, signals: Signals, policy: AutoscalerPolicy, now: float) -> Decision:
    p, cur = policy, state.replicas
    demand = demand_of(signals, p.assumed_request_s)
    busy = demand > 0 or signals.arrival_rate > 0
    last_busy = now if busy else state.last_busy
    keep = max(p.scale_down_stabilization_s, p.scale_up_window_s)
    since = now if state.observed_since is None else state.observed_since
    st = replace(state, history=remember(state.history, now, demand, keep), last_busy=last_busy,
                 observed_since=since)
    idle_s = math.inf if last_busy is None else now - last_busy
    floor = max(p.min_replicas, 1)
    if p.min_replicas == 0 and p.scale_to_zero_after_s is not None and idle_s >= p.scale_to_zero_after_s:
        floor = 0

    recent = window(st.history, now, p.scale_up_window_s)
    avg = sum(recent) / len(recent)
    kv_need = math.ceil(sum(signals.kv_usage) / p.kv_target)
    want = max(math.ceil(avg / p.target_concurrency), kv_need)
    reason = f"demand {avg:.1f} / target {p.target_concurrency:g} per replica"
    if kv_need > math.ceil(avg / p.target_concurrency):
        reason = f"KV usage {sum(signals.kv_usage):.2f} / target {p.kv_target:g} per replica"
    queued = signals.total_waiting + signals.held + signals.overflow_rate
    if signals.attainment is not None and signals.attainment < p.slo_attainment and queued > 0 \
            and signals.starting == 0 and want <= cur:
        want, reason = cur + 1, f"SLO attainment {signals.attainment:.3f} < {p.slo_attainment:g} while queued"

    capacity = signals.ready * p.target_concurrency
    if demand > 0 and (signals.ready == 0 or demand >= p.panic_threshold * capacity):
        # Spike or scale-from-zero: jump straight to what the instantaneous demand needs.
        need = max(math.ceil(demand / p.target_concurrency), 1, want)
        st = replace(st, panic_until=now + p.panic_hold_s)
        new = min(max(need, cur, floor), p.max_replicas)
        return scaled(st, now, new, f"panic: demand {demand:.1f} >= {p.panic_threshold:g}x capacity "
                                             f"of {signals.ready} ready replicas")

    if want > cur:
        new = min(want, cur + p.max_step_up, p.max_replicas)
        return scaled(st, now, max(new, floor), f"scale up: {reason}")
    if cur < floor:
        return scaled(st, now, min(floor, p.max_replicas), "raise to minimum")
    if cur > p.max_replicas:
        return scaled(st, now, p.max_replicas, "lower to maximum")
    if cur == floor:
        return scaled(st, now, cur, "at minimum")
    return _scale_down(st, signals, p, now, floor)


def _scale_down(st: ScalerState, signals: Signals, p: AutoscalerPolicy, now: float, floor: int) -> Decision:
    cur = st.replicas
    if now < st.panic_until:
        return scaled(st, now, cur, "panic mode blocks scale-down")
    if signals.attainment is not None and signals.attainment < p.slo_attainment:
        return scaled(st, now, cur, f"SLO attainment {signals.attainment:.3f} below target")
    if now - st.observed_since < p.scale_down_stabilization_s:
        return scaled(st, now, cur, "not yet observed for a stabilization window")
    if st.last_scale_time is not None and now - st.last_scale_time < p.scale_down_interval_s:
        return scaled(st, now, cur, "waiting to observe the last change")
    peak = max(window(st.history, now, p.scale_down_stabilization_s))
    fits = math.ceil(peak / (p.target_concurrency * p.scale_down_utilization))
    fits = max(fits, math.ceil(sum(signals.kv_usage) / (p.kv_target * p.scale_down_utilization)))
    new = max(fits, cur - p.max_step_down, floor)
    if new >= cur:
        return scaled(st, now, cur, f"peak demand {peak:.1f} needs {fits} replicas")
    if new == 0:
        return scaled(st, now, 0, f"idle for {p.scale_to_zero_after_s:g} s: scale to zero")
    return scaled(st, now, new, f"scale down: peak demand {peak:.1f} over "
                                         f"{p.scale_down_stabilization_s:g} s fits {fits} replicas")
