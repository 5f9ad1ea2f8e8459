"""Dollars: GPU spend, overflow spend, cost per 1k requests and the break-even rate, and the prices a spec sets.

A replica costs its GPUs' hourly price whether busy or not; the API bills per token, prompt and output apart.
Cost per 1k requests is spend / requests x 1000: for one replica serving a steady rate, its hourly price /
(requests per hour) x 1000."""

import math
from dataclasses import dataclass

from floodway.operator.planner.gpus import find_gpu


@dataclass(frozen=True)
class Prices:
    gpu_per_hour: float | None  # one GPU; None: unknown, GPU spend not counted
    input_per_million: float | None  # the overflow API's, per million prompt tokens
    output_per_million: float | None  # per million output tokens; both None: overflow spend not counted
    gpus_per_replica: int = 1

    @property
    def replica_per_hour(self) -> float | None:
        return None if self.gpu_per_hour is None else self.gpu_per_hour * self.gpus_per_replica

    @property
    def api_known(self) -> bool:
        return self.input_per_million is not None or self.output_per_million is not None


def gpu_spend(replica_hours: float, replica_per_hour: float) -> float:
    return replica_hours * replica_per_hour


def api_spend(prompt_tokens: float, output_tokens: float, input_per_million: float | None,
              output_per_million: float | None) -> float:
    """What the API bills for these tokens (an unset price counts as 0)."""
    return (prompt_tokens * (input_per_million or 0.0) + output_tokens * (output_per_million or 0.0)) / 1e6


def per_1k(spend: float, requests: int) -> float:
    return spend / requests * 1000 if requests else math.nan


def per_1k_at_rate(hourly: float, requests_per_s: float) -> float:
    """Cost per 1k requests of capacity priced `hourly` serving a steady rate: hourly / (requests per hour) x 1000."""
    return hourly / (requests_per_s * 3600) * 1000


def break_even_requests_per_s(replica_per_hour: float, api_cost_per_request: float,
                              capacity_requests_per_s: float) -> float | None:
    """The request rate from which one always-on replica costs less than sending every request to the API
    (replica_per_hour / 3600 = rate x api_cost_per_request); None where the API stays cheaper up to what one
    replica can serve."""
    if api_cost_per_request <= 0:
        return None
    rate = replica_per_hour / 3600 / api_cost_per_request
    return rate if rate < capacity_requests_per_s else None


@dataclass(frozen=True)
class Spend:
    """Dollars a run spent: on GPUs (None: no GPU price) and on the overflow API (None: no API price)."""
    requests: int
    self_hosted: float | None
    overflow: float | None

    @property
    def total(self) -> float | None:
        parts = [x for x in (self.self_hosted, self.overflow) if x is not None]
        return sum(parts) if parts else None

    def per_1k(self) -> tuple[float | None, float | None, float | None]:
        """($ per 1k requests self-hosted, overflow, total), each over all the run's requests."""
        return tuple(None if x is None else per_1k(x, self.requests)
                     for x in (self.self_hosted, self.overflow, self.total))


def run_spend(prices: Prices, replica_hours: float, requests: int, overflow_prompt_tokens: int,
          overflow_output_tokens: int) -> Spend:
    hourly = prices.replica_per_hour
    return Spend(requests, None if hourly is None else gpu_spend(replica_hours, hourly),
                 api_spend(overflow_prompt_tokens, overflow_output_tokens, prices.input_per_million,
                           prices.output_per_million) if prices.api_known else None)


def spec_prices(spec) -> Prices:
    """An InferenceService's prices: resources.gpuHourlyPrice, else the planner's table price of gpuType; and
    overflow.pricing."""
    res, pricing = spec.resources, spec.overflow.pricing
    gpu = res.gpu_hourly_price
    if gpu is None and res.gpu_type:
        found = find_gpu(res.gpu_type)
        gpu = found.price_per_hour if found else None
    return Prices(gpu, pricing.input_per_million_tokens, pricing.output_per_million_tokens, res.gpus)
