"""The overflow share the gateway holds where autoscaling.priority is budget (overflow_budget.py): a request overflows
only while the share spent, counting it, stays within max_share of the requests and of the tokens that arrived, both
decayed over SHARE_WINDOW_S; past it, a request the triggers would overflow stays local."""

import json
import math
import random
from dataclasses import asdict

import aiohttp
import pytest
from floodway.operator.autoscaler.signals import parse_gateway
from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.overflow import SHARE_SPENT, OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.overflow_budget import (
    SHARE_WINDOW_S,
    BudgetLimits,
    BudgetState,
    budget_arrive,
    budget_take,
    share_allows,
    spent_shares,
)
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.routing import RoutingWeights
from floodway.operator.gateway.upstream import UpstreamClient

from tests.unit.gateway.stand_in import completions_stand_in

SHARE = BudgetLimits(max_share=0.25)


def arrived(n: int, tokens: int, limits=SHARE, state=BudgetState(), now=0.0) -> BudgetState:
    for _ in range(n):
        state = budget_arrive(state, limits, tokens, now)
    return state


def test_a_request_overflows_while_the_share_counting_it_stays_within_the_limit():
    s = arrived(4, 100)  # 4 requests of 100 tokens: a quarter of them is one request, 100 tokens
    assert share_allows(s, SHARE, 100, 0.0)
    s = budget_take(s, SHARE, 100, 0.0)
    assert spent_shares(s.share) == (0.25, 0.25)
    assert not share_allows(s, SHARE, 1, 0.0)
    assert share_allows(arrived(4, 100, state=s), SHARE, 100, 0.0)  # four more arrivals earn the next one


def test_a_long_prompt_spends_the_share_by_its_tokens():
    s = arrived(8, 100)  # 2 requests' share, 200 tokens' share
    assert not share_allows(s, SHARE, 500, 0.0)  # within the request share, five times the token share
    assert share_allows(s, SHARE, 200, 0.0)


def test_nothing_arrived_is_no_share_and_no_limit_is_no_count():
    assert not share_allows(BudgetState(), SHARE, 1, 0.0)
    assert share_allows(BudgetState(), BudgetLimits(), 10**9, 0.0)
    assert budget_arrive(BudgetState(), BudgetLimits(), 100, 0.0) == BudgetState()
    assert budget_take(BudgetState(), BudgetLimits(), 100, 0.0).share == BudgetState().share


def test_the_counts_decay_over_the_window():
    s = budget_take(arrived(4, 100), SHARE, 100, 0.0)
    later = arrived(1, 100, state=s, now=SHARE_WINDOW_S)
    k = math.exp(-1.0)
    assert later.share.arrived == pytest.approx(4 * k + 1)
    assert later.share.overflowed == pytest.approx(k)


def test_past_the_share_the_triggered_request_stays_local_or_waits_for_a_replica():
    policy = OverflowPolicy(enabled=True, ttft_slo_s=0.5, budget=SHARE)
    spent = budget_take(arrived(4, 100), SHARE, 100, 0.0)
    req = RequestInfo(tokens=100, arrived_at=0.0)
    d = overflow_decision(PoolState(ready=2, waiting=8, budget=spent), policy, req, 0.0)
    assert (d.target, d.reason) == ("local", SHARE_SPENT)
    assert overflow_decision(PoolState(ready=0, budget=spent), policy, req, 0.0).target == "hold"
    fresh = arrived(4, 100)
    assert overflow_decision(PoolState(ready=2, waiting=8, budget=fresh), policy, req, 0.0).target == "overflow"


@pytest.mark.parametrize("seed", range(5))
def test_overflow_never_passes_the_share_of_what_arrived_since_the_start(seed):
    """The decayed credit never exceeds the undecayed one, so the raw counts hold the share at every moment, in
    requests and in tokens, whatever the arrival times, sizes and triggers."""
    rng, limits, s, t = random.Random(seed), BudgetLimits(max_share=0.04), BudgetState(), 0.0
    raw = [0, 0, 0, 0]  # arrived, overflowed, arrived tokens, overflowed tokens
    policy = OverflowPolicy(enabled=True, ttft_slo_s=0.5, budget=limits)
    for _ in range(5000):
        t += rng.expovariate(rng.choice((0.05, 2.0, 30.0)))
        tokens = max(1, int(rng.lognormvariate(math.log(2000), 1.2)))
        s = budget_arrive(s, limits, tokens, t)
        raw[0], raw[2] = raw[0] + 1, raw[2] + tokens
        pool = PoolState(ready=1, waiting=rng.choice((0, 8)), budget=s)
        if overflow_decision(pool, policy, RequestInfo(tokens, t), t).target == "overflow":
            s = budget_take(s, limits, tokens, t)
            raw[1], raw[3] = raw[1] + 1, raw[3] + tokens
        assert raw[1] <= 0.04 * raw[0] + 1e-9 and raw[3] <= 0.04 * raw[2] + 1e-6
    assert raw[1] > 0.02 * raw[0]  # and it does spend the share


async def test_the_proxy_counts_each_request_against_the_share_and_keeps_the_rest_local():
    """Through Gateway.handle over real HTTP on 127.0.0.1 (one stand-in server plays the engine, /v1/..., and the
    overflow API, /ext/v1/...): with the engine queued past the threshold and a 60% share, every other request
    overflows (60% of what arrived, counting it), the others stay local, and the counters the autoscaler reads say
    so."""
    seen: list[tuple[str, dict]] = []
    runner, url = await completions_stand_in(seen)
    config = GatewayConfig.model_validate({"backends": {"static": [url]}, "overflow": {
        "enabled": True, "base_url": url + "/ext/v1", "max_waiting_per_replica": 1, "max_share": 0.6}})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([(url, url)])
    table.backends[url].ready, table.backends[url].waiting = True, 5.0
    local, metrics = UpstreamClient(2.0, 10.0), GatewayMetrics()
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 8}).encode()
    try:
        async with aiohttp.ClientSession() as remote:
            gateway = Gateway(config, table, metrics, local, remote)
            for _ in range(4):
                assert (await gateway.handle("/v1/completions", body, {})).status_code == 200
            assert json.loads(json.dumps(asdict(gateway.budget)))["share"]["overflowed"] > 1  # /debug/state's form
    finally:
        local.close()
        await runner.cleanup()
    assert [path for path, _ in seen] == ["/v1/completions", "/ext/v1/completions"] * 2
    got = parse_gateway(metrics.render().decode())
    assert (got.overflow_total, got.declined_total) == (2, 2)
    assert got.overflow_tokens_total == got.request_tokens_total / 2 > 0
