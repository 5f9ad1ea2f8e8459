"""The baseline policies model the documented behaviour of HPA, KEDA (production-stack defaults) and KPA."""

import pytest
from floodway.operator.autoscaler.baselines import (
    HpaPolicy,
    KedaPolicy,
    KpaPolicy,
    StaticPolicy,
    decide_hpa,
    decide_keda,
    decide_kpa,
    decide_static,
)
from floodway.operator.autoscaler.policy import ScalerState
from floodway.operator.autoscaler.signals import Signals


def ticks(decide, policy, state, signals_at, start, end):
    out, t = [], start
    while t <= end:
        d = decide(state, signals_at(t, state.replicas), policy, t)
        out.append((t, d))
        state, t = d.state, t + policy.interval_seconds
    return out


def test_static_never_moves():
    d = decide_static(ScalerState(3), Signals(ready=3, waiting=(50, 50, 50)), StaticPolicy(3), 0)
    assert d.replicas == 3
    with pytest.raises(ValueError):
        StaticPolicy(-1)


def test_keda_defaults_are_production_stack():
    p = KedaPolicy()
    assert (p.threshold, p.interval_seconds, p.cooldown_s) == (5, 15, 360)


def test_keda_scales_on_waiting_and_down_only_after_cooldown():
    p = KedaPolicy(max_replicas=10)
    d = decide_keda(ScalerState(2), Signals(ready=2, waiting=(12, 11)), p, 0)
    assert d.replicas == 5  # ceil(23 / 5)
    # Running requests alone, with nothing waiting, are invisible to KEDA: it scales down after the cooldown.
    out = ticks(decide_keda, p, d.state, lambda t, n: Signals(ready=n, running=(60,) * n), 15, 900)
    first_down = next(t for t, x in out if x.replicas < 5)
    assert first_down >= 360
    assert out[-1][1].replicas == 1


def test_keda_tolerance_holds_near_target():
    d = decide_keda(ScalerState(2), Signals(ready=2, waiting=(5.2, 5.0)), KedaPolicy(), 0)
    assert d.replicas == 2


def test_hpa_follows_utilisation_with_rate_limit():
    p = HpaPolicy(max_replicas=20)
    d = decide_hpa(ScalerState(2), Signals(ready=2, utilization=(1.0, 1.0)), p, 0)
    assert d.replicas == 3  # ceil(2 * 1.0 / 0.8)
    d = decide_hpa(ScalerState(10), Signals(ready=2, utilization=(1.0, 1.0)), p, 0)
    assert d.replicas == 10  # no scale-down before a whole stabilization window


def test_kpa_panics_on_2x_and_holds_during_panic():
    p = KpaPolicy(target_concurrency=10, max_replicas=20)
    calm = ticks(decide_kpa, p, ScalerState(2), lambda t, n: Signals(ready=2, running=(8, 8)), 0, 60)
    state = calm[-1][1].state
    assert calm[-1][1].replicas == 2
    d = decide_kpa(state, Signals(ready=2, running=(30, 30), waiting=(20, 20)), p, 62)
    d = decide_kpa(d.state, Signals(ready=2, running=(30, 30), waiting=(20, 20)), p, 64)
    assert d.replicas >= 4 and d.reason.startswith("panic")
    after = ticks(decide_kpa, p, d.state, lambda t, n: Signals(ready=n, running=(1,) * n), 66, 100)
    assert min(x.replicas for _, x in after) >= d.replicas
