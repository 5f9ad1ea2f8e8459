"""Self-hosting cost against an API price: cost per million tokens and the break-even volume.

A replica costs its GPUs' hourly price whether busy or not; an API costs per token. Token counts are input
plus output; the API's blended price per million uses the workload's own input/output mix."""

from dataclasses import dataclass

from floodway.operator.planner.prices import api_spend, break_even_requests_per_s
from floodway.operator.planner.units import PlanError


@dataclass(frozen=True)
class CostPlan:
    replica_price_per_hour: float
    self_cost_per_request: float  # a fully busy replica
    self_per_million_tokens: float  # a fully busy replica
    self_per_million_tokens_at_rate: float | None  # the replicas the rate needs, at that rate
    api_cost_per_request: float | None
    api_per_million_tokens: float | None
    break_even_requests_per_s: float | None  # None: no API price given, or self-hosting never gets cheaper
    break_even_tokens_per_day: float | None
    verdict: str


def cost_plan(gpu_price_per_hour: float, gpus: int, capacity_requests_per_s: float, prompt_tokens: int,
              output_tokens: int, rate: float | None = None, replicas: int | None = None,
              api_price_in: float | None = None, api_price_out: float | None = None) -> CostPlan:
    """Prices: GPU per hour; API per million input and output tokens."""
    for value, what in ((gpu_price_per_hour, "GPU price per hour"), (api_price_in, "API input price"),
                        (api_price_out, "API output price")):
        if value is not None and value < 0:
            raise PlanError(f"{what} must not be negative, got {value}")
    tokens = prompt_tokens + output_tokens
    hourly = gpu_price_per_hour * gpus
    self_req = hourly / 3600 / capacity_requests_per_s
    at_rate = replicas * hourly / 3600 / (rate * tokens) * 1e6 if rate and replicas else None
    api_req = api_mtok = even_rps = even_day = None
    verdict = "no API price given (--api-price-in/--api-price-out)"
    if api_price_in is not None or api_price_out is not None:
        api_req = api_spend(prompt_tokens, output_tokens, api_price_in, api_price_out)
        api_mtok = api_req / tokens * 1e6
        even_rps = break_even_requests_per_s(hourly, api_req, capacity_requests_per_s)
        if even_rps is None:
            verdict = "the API is cheaper even for a fully busy replica"
        else:
            even_day = even_rps * 86400 * tokens
            verdict = (f"one replica beats the API from {even_rps:.3g} requests/s ({even_day / 1e6:,.1f}M tokens/day); "
                       f"busy, it costs {self_req / api_req:.1%} of the API per request")
    return CostPlan(hourly, self_req, self_req / tokens * 1e6, at_rate, api_req, api_mtok, even_rps, even_day,
                    verdict)
