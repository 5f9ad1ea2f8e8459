"""The simulator's $ figures: overflowed requests billed per token, replica-hours per GPU-hour, at the prices of the
simulated spec (the planner's table for the profile's GPU unless overridden)."""

from dataclasses import replace

import pytest
from floodway.operator.autoscaler.baselines import StaticPolicy, decide_static
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.planner.prices import Prices
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, simulate
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.report import summarize, table
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.traces import steps

PRICES = Prices(2.0, 0.5, 1.5)  # $2/GPU-hour; $0.50 / $1.50 per million prompt / output tokens
CFG = SimConfig(profile=ReplicaProfile(max_num_seqs=16), cold_start_s=60.0,
                overflow=OverflowPolicy(enabled=True), prices=PRICES)


def static(n):
    return Scaler(f"static-{n}", decide_static, StaticPolicy(n), n)


def test_with_no_replica_every_request_is_billed_by_the_api():
    tr = steps([2], step_s=60, seed=3)
    s = summarize(simulate(tr, static(0), CFG))
    prompt, output = sum(r.prompt_tokens for r in tr), sum(r.output_tokens for r in tr)
    assert s.overflow_share == 1.0 and s.overflow_token_share == 1.0
    assert s.spend.self_hosted == 0.0
    assert s.spend.overflow == pytest.approx((prompt * 0.5 + output * 1.5) / 1e6)
    assert s.spend.per_1k()[2] == pytest.approx(s.spend.overflow / len(tr) * 1000)


def test_a_mixed_run_bills_replica_hours_and_only_the_overflowed_tokens():
    tr = steps([12], step_s=300, seed=4)  # one small replica cannot keep up: some requests overflow
    res = simulate(tr, static(1), CFG)
    s = summarize(res)
    over = [r for r in res.requests if r.where == "overflow"]
    assert 0 < len(over) < len(tr)
    api = sum(r.prompt * 0.5 + r.output * 1.5 for r in over) / 1e6
    assert s.spend.overflow == pytest.approx(api) and s.spend.self_hosted == pytest.approx(res.replica_hours * 2.0)
    assert s.overflow_token_share == pytest.approx(
        sum(r.prompt + r.output for r in over) / sum(r.prompt_tokens + r.output_tokens for r in tr))
    assert s.spend.per_1k() == pytest.approx((res.replica_hours * 2.0 / len(tr) * 1000, api / len(tr) * 1000,
                                              (res.replica_hours * 2.0 + api) / len(tr) * 1000))
    assert "$/1k total" in table([s])


def test_without_prices_the_dollar_columns_say_so():
    s = summarize(simulate(steps([2], step_s=60, seed=3), static(1), replace(CFG, prices=Prices(None, None, None))))
    assert s.spend.per_1k() == (None, None, None)
    assert "| -                |" in table([s])


def test_the_simulated_spec_prices_the_default_profile_s_gpu_from_the_table():
    _, cfg, *_ = prepare(Options(trace="steps:rates=1,step_s=60", api_price_in=0.2, api_price_out=0.6))
    assert cfg.prices == Prices(3.0, 0.2, 0.6, 1)  # h100-80gb's indicative $3.00 in gpus.yaml
    _, cfg, *_ = prepare(Options(trace="steps:rates=1,step_s=60", gpu_price_per_hour=1.99))
    assert cfg.prices == Prices(1.99, None, None, 1)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        prepare(Options(trace="steps:rates=1,step_s=60", api_price_in=-1))


def _priced(name, attainment, overflow, gpu, api):
    from floodway.operator.planner.prices import Spend
    from floodway.operator.simulator.report import Summary

    return name, Summary(name, 1000, attainment, 1.0, 0.1, 0.4, gpu / 2.0, overflow, 0, 0, overflow,
                         Spend(1000, gpu, api))


def test_the_cheapest_schedule_meets_the_slo_whatever_its_overflow():
    from floodway.operator.simulator.bound import best_schedule, cheapest_schedule

    results = [_priced("big", 0.999, 0.0, 10.0, 0.0), _priced("small, 12% overflow", 0.995, 0.12, 4.0, 3.0),
               _priced("too small", 0.95, 0.30, 2.0, 1.0)]
    assert cheapest_schedule(results)[0] == "small, 12% overflow"  # $7 against $10; "too small" misses the SLO
    assert best_schedule(results)[0] == "big"  # the replica-hours bound keeps to <= 5% overflow
    unpriced = [_priced("x", 0.999, 0.0, 10.0, None)]
    assert cheapest_schedule(unpriced) is None  # a total of one part would favour it
