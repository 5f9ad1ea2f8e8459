"""The overflow budget in the simulator: the simulated gateway applies the gateway's own share limit (priority budget)
and exports the counters the operator reads (tokens, declined requests), so the share a run measures, in requests and
in tokens, is the one the spec's autoscaling.overflowShare promises."""

import math

import pytest
from floodway.operator.simulator import compare
from floodway.operator.simulator.des import Simulation
from floodway.operator.simulator.report import summarize
from floodway.operator.simulator.run import Options, prepare

TRACE = "long-context:duration_s=600,low_rate=2,high_rate=4,period_s=600"  # long prompts on a cold pool
SIZING = compare.Sizing(static_peak=4, static_mean=2, initial=1, max_replicas=8)


def ours(priority: str):
    trace, cfg, policy, _, _ = prepare(Options(trace=TRACE, ttft_slo_s=5.0, tpot_slo_s=0.1, priority=priority))
    return summarize(compare.run(trace, ["floodway+overflow"], cfg, policy, SIZING)[1][0])


def test_priority_budget_holds_the_share_in_requests_and_in_tokens_where_slo_spends_past_it():
    slo, budget = ours("slo"), ours("budget")
    assert slo.overflow_token_share > 0.04  # long prompts overflow first: past the 4% share in tokens
    assert budget.overflow_share <= 0.04 and budget.overflow_token_share <= 0.04
    assert budget.overflow_token_share > 0.02  # it spends the share, it does not forgo it
    assert budget.attainment < slo.attainment  # what holding it costs on this trace


def test_the_simulated_gateway_counts_tokens_and_declined_requests_as_the_gateway_exports_them():
    trace, cfg, policy, _, _ = prepare(Options(trace=TRACE, ttft_slo_s=5.0, tpot_slo_s=0.1, priority="budget"))
    cfg = compare.overflow_enabled(cfg, True)
    assert cfg.overflow.budget.max_share == pytest.approx(0.04)  # the spec's overflowShare, as the gateway gets it
    sim = Simulation(trace, compare.build("floodway", SIZING, policy, policy.per_replica), cfg)
    res = sim.run()
    sample = sim.gateway.sample(math.inf)
    over = [r for r in res.requests if r.where == "overflow"]
    assert sample.requests_total == len(trace)
    assert sample.request_tokens_total == sum(r.prompt_tokens + r.output_tokens for r in trace)
    assert sample.overflow_tokens_total == sum(r.prompt + r.output for r in over) > 0
    assert sample.declined_total > 0
