"""A simulated population of tenants and SLO classes (issue 40): which tenant sent each request of a trace and which
class it asks for, as a deterministic tagging from the seed, the classes the simulated spec declares, and the
tenants' limits.

- Classes: `--classes interactive=0.3,standard=0.5,batch=0.2` gives each class its share of the requests (the rest:
  no class, the service's SLO and overflow rule). Each class is one of BUILTIN_CLASSES, its TTFT SLO a multiple
  of the scenario's (so one set fits a 0.5 s and a 5 s scenario alike), and so is batch's TPOT SLO; interactive and
  standard keep the service's TPOT.
- Tenants: `--tenants N` spreads the requests evenly over tenants t1..tN; the last one (tN) then sends
  ABUSE times its share: on top of its own requests, each request of the trace is copied to it (same sizes and
  class draw, within a second of the original) (ABUSE - 1) / N times on average. `--abuse 1` is the same
  population without it: the same requests, tagged the same.
- Limits: every tenant is held to maxRequestsPerMinute (gateway.tenants.default), by default TENANT_HEADROOM times
  a fair tenant's share of the trace's busiest minute: what a fair tenant needs with room to spare.
"""

import math
import random
from dataclasses import replace

from floodway.operator.simulator.traces import TraceRequest, drawn, rate_stats, shares

# The built-in classes (spec.classes entries) the simulator's --classes names, with their TTFT and TPOT SLOs as
# multiples of the scenario's (None: no tpotMs, the service's TPOT). Interactive overflows at its SLO, standard waits
# locally up to four times it before it overflows, batch never overflows and is queued by the engines (no queueLimit:
# it waits rather than being refused). Batch jobs only need throughput: the engines preempt their answers for a
# higher class's requests, and the recompute makes them miss the service's TPOT, so batch is held to a loose 10x, which
# still catches a starved answer. A class's TPOT changes only what attainment counts (the tables, and the static-peak
# search that sizes a run: compare.py); the engines' prefill budget keeps the service's.
BUILTIN_CLASSES = {
    "interactive": ({"name": "interactive", "priority": 0, "overflow": True}, 1.0, None),
    "standard": ({"name": "standard", "priority": 5, "overflow": True}, 4.0, None),
    "batch": ({"name": "batch", "priority": 10, "overflow": False}, 120.0, 10.0),
}
ABUSE = 10.0  # the last tenant's traffic, in multiples of its share (1: no abusive tenant)
TENANT_HEADROOM = 2.0  # the default maxRequestsPerMinute over a fair tenant's share of the busiest minute


def class_shares(text: str) -> dict[str, float]:
    """'interactive=0.3,batch=0.2' -> each built-in class's share; ValueError for an unknown class."""
    out = shares(text, "classes")
    unknown = set(out) - set(BUILTIN_CLASSES)
    if unknown:
        raise ValueError(f"classes {text!r}: unknown {sorted(unknown)}; choose from {', '.join(BUILTIN_CLASSES)}")
    return out


def class_specs(names: list[str], ttft_slo_s: float, tpot_slo_s: float,
                batch_max_replicas: int | None = None) -> list[dict]:
    """The spec.classes entries of these built-in classes under a scenario whose TTFT and TPOT SLOs are `ttft_slo_s`
    and `tpot_slo_s`, batch capped at `batch_max_replicas` (None: no cap)."""
    cap = {"batch": {"maxReplicas": batch_max_replicas}} if batch_max_replicas is not None else {}
    out = []
    for n in names:
        spec, ttft, tpot = BUILTIN_CLASSES[n]
        own_tpot = {"tpotMs": tpot * tpot_slo_s * 1000} if tpot is not None else {}
        out.append({**spec, "ttftMs": ttft * ttft_slo_s * 1000, **own_tpot, **cap.get(n, {})})
    return out


def tenant_names(n: int) -> list[str]:
    if n < 1:
        raise ValueError(f"tenants must be >= 1, got {n}")
    return [f"t{i}" for i in range(1, n + 1)]


def fair_tenant_rpm(trace: list[TraceRequest], tenants: int) -> int:
    """The default maxRequestsPerMinute: TENANT_HEADROOM x a fair tenant's share of the busiest minute."""
    _, peak = rate_stats(trace)
    return max(1, math.ceil(TENANT_HEADROOM * peak * 60.0 / tenants))


def tag_population(trace: list[TraceRequest], classes: dict[str, float], tenants: int, abuse: float = ABUSE,
                   seed: int = 0) -> list[TraceRequest]:
    """Each request of `trace` gets a tenant (evenly) and a class (by `classes`; {}: none), then the last tenant's
    copies of `abuse` (see the module's doc). The tags of the trace's own requests do not depend on `abuse`."""
    if abuse < 1:
        raise ValueError(f"abuse must be >= 1 (1: no abusive tenant), got {abuse:g}")
    names = tenant_names(tenants) if tenants else [None]
    rng, extra = random.Random(f"population-{seed}"), random.Random(f"abuse-{seed}")
    out = [replace(r, tenant=names[rng.randrange(len(names))], klass=drawn(rng.random(), classes)) for r in trace]
    copies = (abuse - 1) / len(names) if tenants else 0.0
    for r in trace if copies else ():
        for _ in range(int(copies) + (extra.random() < copies % 1)):
            out.append(replace(r, arrival_s=r.arrival_s + extra.random(), tenant=names[-1],
                               klass=drawn(extra.random(), classes)))
    out.sort(key=lambda r: r.arrival_s)
    return out
