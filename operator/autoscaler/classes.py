"""SLO classes in the autoscaler (spec.classes): each class's demand and TTFT attainment as the gateways count them,
weighed by the class's cap (maxReplicas), so that batch demand alone grows the pool only up to its cap."""

import math
from collections.abc import Mapping


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


def measured(class_ttft: Mapping[str, tuple[float, float]]) -> bool:
    """Whether the gateways measured any class's TTFT attainment in the window."""
    return any(n > 0 for _, n in class_ttft.values())


def below_target(attainment: float, measured: float, target: float, z: float) -> bool:
    """Attainment below target by more than sampling noise: with `measured` requests in the window, the share a pool
    exactly at target shows spreads by sqrt(target (1 - target) / measured)."""
    noise = math.sqrt(target * (1 - target) / measured) if measured > 0 else 0.0
    return attainment < target - z * noise


def short_class(class_ttft: Mapping[str, tuple[float, float]], caps: Mapping[str, int], replicas: int,
                target: float, z: float) -> tuple[str, float] | None:
    """(a class short of its TTFT SLO target that may still add a replica, its attainment), or None. A class at its
    cap (`replicas` >= maxReplicas) adds none: its misses wait for capacity the others leave."""
    for c, (met, measured) in sorted(class_ttft.items()):
        if measured > 0 and replicas < caps.get(c, math.inf) and below_target(met / measured, measured, target, z):
            return c, met / measured
    return None
