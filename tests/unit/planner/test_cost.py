"""Cost per million tokens against an API price, and the break-even volume (hand-computed)."""

import pytest
from floodway.operator.planner.cost import cost_plan
from floodway.operator.planner.units import PlanError


def test_break_even_against_an_api():
    # $2/GPU-hour, a replica serves 1 request/s of 1000 in + 1000 out; API $1 in, $3 out per million.
    c = cost_plan(2.0, gpus=1, capacity_requests_per_s=1.0, prompt_tokens=1000, output_tokens=1000,
                  rate=0.5, replicas=1, api_price_in=1.0, api_price_out=3.0)
    assert c.self_cost_per_request == pytest.approx(2 / 3600)
    assert c.self_per_million_tokens == pytest.approx(2 / 3600 / 2000 * 1e6)  # $0.278
    assert c.self_per_million_tokens_at_rate == pytest.approx(2 / 3600 / (0.5 * 2000) * 1e6)  # half busy: $0.556
    assert c.api_cost_per_request == pytest.approx(0.004)
    assert c.api_per_million_tokens == pytest.approx(2.0)
    # one replica ($2/hour) equals the API at 2 / 3600 / 0.004 = 0.139 requests/s = 24M tokens/day
    assert c.break_even_requests_per_s == pytest.approx(2 / 3600 / 0.004)
    assert c.break_even_tokens_per_day == pytest.approx(24_000_000)
    assert "0.139 requests/s (24.0M tokens/day)" in c.verdict and "13.9% of the API" in c.verdict


def test_multi_gpu_replica_costs_all_its_gpus():
    assert cost_plan(2.0, 4, 1.0, 100, 100).replica_price_per_hour == 8.0


def test_api_cheaper_even_when_busy():
    c = cost_plan(10.0, 1, 0.01, 1000, 1000, api_price_in=0.1, api_price_out=0.1)
    assert c.break_even_requests_per_s is None and "API is cheaper even for a fully busy replica" in c.verdict


def test_without_api_price():
    c = cost_plan(1.0, 1, 1.0, 100, 100)
    assert c.api_cost_per_request is None and "no API price" in c.verdict and c.self_per_million_tokens_at_rate is None


def test_negative_prices_are_refused():
    with pytest.raises(PlanError, match="GPU price per hour must not be negative"):
        cost_plan(-1.0, 1, 1.0, 100, 100)
    with pytest.raises(PlanError, match="API output price"):
        cost_plan(1.0, 1, 1.0, 100, 100, api_price_out=-2)
