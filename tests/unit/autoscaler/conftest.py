"""Shared by the policy's tests: a small policy, evenly spread signals, and ticking a policy over time."""

from dataclasses import replace

from floodway.operator.autoscaler.policy import AutoscalerPolicy, decide
from floodway.operator.autoscaler.signals import Signals

P = AutoscalerPolicy(min_replicas=1, max_replicas=10, target_concurrency=10, interval_s=5)


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
        state, t = d.state, t + policy.interval_s
    return out


TOKENS = replace(P, prefill_tokens_per_s=10_000.0, prefill_target=0.5)  # 5k prompt tokens/s per replica
