"""SLO classes in the autoscaler (spec.classes): each class's demand and SLO attainment (TTFT and TPOT) as the
gateways count them, weighed by the class's cap (maxReplicas), so that batch demand alone grows the pool only up to
its cap."""

import math
from collections.abc import Mapping

from floodway.operator.autoscaler.signals import ClassCounts


def weighed_demand(demand: float, in_flight: Mapping[str, float], caps: Mapping[str, int],
                   per_replica: float) -> float:
    """The concurrency the pool is sized for out of `demand`, of which `in_flight` is by class. The classes without a
    cap count whole; then each capped class, smallest cap first, raises that level by its own demand but never past
    its cap's capacity (cap x per_replica), so capped demand fills the room up to the cap and no further, and a
    capped class adds nothing where the others already need more than its cap. Never more than `demand`: the
    gateways' counts include requests the engines' gauges do not show yet."""
    capped = {c: in_flight.get(c, 0.0) for c in caps}
    level = max(0.0, demand - sum(capped.values()))
    for c in sorted(capped, key=caps.get):
        level = max(level, min(level + capped[c], caps[c] * per_replica))
    return min(level, demand)


def measured(class_slo: Mapping[str, ClassCounts]) -> bool:
    """Whether the gateways measured any class's attainment (its answers' TTFT) in the window."""
    return any(counts.attainment is not None for counts in class_slo.values())


def sampled(counts: ClassCounts) -> float:
    """The answers a class's attainment stands on, for its sampling noise: the smaller of its TTFT and TPOT counts
    (TTFT's alone while no TPOT is measured). The combined share is no surer than its sparser part (TPOT counts only
    answers of two tokens or more that ended whole), so the noise is never understated."""
    return min(n for _, n in (counts.ttft, counts.tpot) if n > 0) if counts.ttft[1] > 0 else 0.0


def below_target(attainment: float, measured: float, target: float, z: float) -> bool:
    """Attainment below target by more than sampling noise: with `measured` requests in the window, the share a pool
    exactly at target shows spreads by sqrt(target (1 - target) / measured)."""
    noise = math.sqrt(target * (1 - target) / measured) if measured > 0 else 0.0
    return attainment < target - z * noise


def short_class(class_slo: Mapping[str, ClassCounts], caps: Mapping[str, int], replicas: int,
                target: float, z: float) -> tuple[str, float] | None:
    """(a class short of its SLO target, its answers judged on TTFT and TPOT together (ClassCounts.attainment), that
    may still add a replica, its attainment), or None. A class at its cap (`replicas` >= maxReplicas) adds none: its
    misses wait for capacity the others leave."""
    for c, counts in sorted(class_slo.items()):
        a = counts.attainment
        if a is not None and replicas < caps.get(c, math.inf) and below_target(a, sampled(counts), target, z):
            return c, a
    return None
