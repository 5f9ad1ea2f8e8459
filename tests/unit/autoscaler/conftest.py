"""Shared by the policy's tests: a small policy, evenly spread signals, and ticking a policy over time."""

from dataclasses import replace

from floodway.operator.autoscaler.policy import decide
from floodway.operator.autoscaler.signals import Signals
from floodway.operator.controller.scaling import default_policy

P = default_policy(replicas_min=1, replicas_max=10, target_concurrency=10, interval_seconds=5)


def sig(ready, running=0.0, waiting=0.0, **kw) -> Signals:
    """Signals with the load spread evenly over `ready` replicas."""
    n = max(ready, 1)
    return Signals(ready=ready, running=(running / n,) * ready, waiting=(waiting / n,) * ready, **kw)


def run(policy, state, signals_at, start, end):
    """Tick every interval; signals_at(t, replicas) -> Signals. Returns the decisions."""
    out, t = [], start
    while t <= end:
        d = decide(state, signals_at(t, state.replicas), policy, t)
        out.append(d)
        state, t = d.state, t + policy.interval_seconds
    return out


TOKENS = replace(P, prefill_tokens_per_second=10_000.0, prefill_target=0.5)  # 5k prompt tokens/s per replica
