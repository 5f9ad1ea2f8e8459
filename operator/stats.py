"""The one quantile rule every bench and the simulator report with, so their figures compare."""


def quantile(values, q: float) -> float:
    """The nearest-rank q-quantile of values (any order); NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
