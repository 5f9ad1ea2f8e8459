"""The price arithmetic against the cost-per-1k formula (cost per 1k requests = hourly price / requests per hour x
1000), with cases computed by hand."""

import math

import pytest
from floodway.operator.planner.prices import (
    Prices,
    api_spend,
    break_even_requests_per_s,
    per_1k,
    per_1k_at_rate,
    run_spend,
    spec_prices,
)
from floodway.operator.spec import InferenceServiceSpec


def test_cost_per_1k_requests_is_the_hourly_price_over_requests_per_hour():
    # $2/hour at 1 request/s: 3,600 requests an hour, $2 / 3,600 x 1000 = $0.5556 per 1k.
    assert per_1k_at_rate(2.0, 1.0) == pytest.approx(0.555_555_6)
    # $3.00/hour at 10 requests/s: 36,000 an hour, $0.0833 per 1k.
    assert per_1k_at_rate(3.0, 10.0) == pytest.approx(3.0 / 36_000 * 1000)
    # The same figure from a run's spend: one replica-hour at $2 over the 3,600 requests it served.
    assert per_1k(2.0, 3600) == pytest.approx(per_1k_at_rate(2.0, 1.0))
    assert math.isnan(per_1k(1.0, 0))


def test_api_spend_prices_prompt_and_output_tokens_apart():
    # 1,000 requests of 1,000 prompt + 200 output tokens at $0.50 / $1.50 per million:
    # 1e6 x 0.5 / 1e6 + 2e5 x 1.5 / 1e6 = $0.50 + $0.30 = $0.80.
    assert api_spend(1_000_000, 200_000, 0.5, 1.5) == pytest.approx(0.80)
    assert api_spend(1_000_000, 200_000, None, 1.5) == pytest.approx(0.30)  # an unset price counts 0


def test_a_run_s_spend_per_1k_requests_self_hosted_overflow_and_total():
    # 3 replicas of 2 GPUs at $2.50 for 4 hours: 12 replica-hours x $5 = $60 of GPUs; 36,000 requests of which
    # 900 overflowed with 9M prompt and 180k output tokens at $1 / $4 per million: $9 + $0.72 = $9.72.
    s = run_spend(Prices(2.5, 1.0, 4.0, gpus_per_replica=2), 12.0, 36_000, 9_000_000, 180_000)
    assert s.self_hosted == pytest.approx(60.0) and s.overflow == pytest.approx(9.72)
    assert s.total == pytest.approx(69.72)
    assert s.per_1k() == pytest.approx((60 / 36, 9.72 / 36, 69.72 / 36))


def test_unknown_prices_count_nothing_rather_than_zero():
    s = run_spend(Prices(None, None, None), 1.0, 100, 1000, 10)
    assert (s.self_hosted, s.overflow, s.total) == (None, None, None) and s.per_1k() == (None, None, None)
    s = run_spend(Prices(2.0, None, None), 1.0, 1000, 1000, 10)
    assert s.total == 2.0 and s.per_1k() == (2.0, None, 2.0)


def test_break_even_rate_where_one_replica_costs_what_the_api_does():
    # $2/hour against $0.004 a request: 2 / 3600 / 0.004 = 0.1389 requests/s (500 requests an hour = $2).
    assert break_even_requests_per_s(2.0, 0.004, 5.0) == pytest.approx(2 / 3600 / 0.004)
    assert break_even_requests_per_s(2.0, 0.004, 0.1) is None  # a replica serves less than that: never
    assert break_even_requests_per_s(2.0, 0.0, 5.0) is None  # a free API


def test_a_spec_s_prices_come_from_its_fields_else_the_gpu_table():
    spec = InferenceServiceSpec.model_validate({
        "model": "m", "engine": {"runtime": "vllm"}, "resources": {"gpus": 2, "gpuType": "h100-80gb"},
        "overflow": {"pricing": {"inputPerMillionTokens": 0.15, "outputPerMillionTokens": 0.6}}})
    p = spec_prices(spec)
    assert (p.gpu_per_hour, p.input_per_million, p.output_per_million, p.gpus_per_replica) == (3.0, 0.15, 0.6, 2)
    assert p.replica_per_hour == 6.0
    spec = InferenceServiceSpec.model_validate({"model": "m", "resources": {"gpuType": "h100-80gb",
                                                                            "gpuHourlyPrice": 1.99}})
    assert spec_prices(spec).gpu_per_hour == 1.99
    assert spec_prices(InferenceServiceSpec.model_validate({"model": "m", "resources": {"gpuType": "l4"}})) \
        .gpu_per_hour is None  # the table has no price for it


def test_a_negative_price_is_refused():
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        InferenceServiceSpec.model_validate({"model": "m", "overflow": {"pricing": {"inputPerMillionTokens": -1}}})
