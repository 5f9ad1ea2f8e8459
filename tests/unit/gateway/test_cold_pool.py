"""The gateway knows an engine's capacity from its first scrape (vllm:cache_config_info), so the first burst
on a cold pool goes to the engine's batch instead of overflowing. The engine's /metrics text is rendered by
the engine's own ServerMetrics and served over real HTTP on 127.0.0.1."""

import random

import aiohttp
import pytest
from aiohttp import web
from floodway.engine.outputs import EngineStats
from floodway.engine.server.metrics import ServerMetrics
from floodway.operator.gateway.backends import BackendChoice, BackendTable
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.routing import RoutingWeights

from tests.unit.gateway.stand_in import serve

IDLE = EngineStats(num_running=0, num_waiting=0, num_free_blocks=2048, num_total_blocks=2048, kv_cache_usage=0.0,
                   prompt_tokens_total=0, generation_tokens_total=0, num_preemptions_total=0,
                   prefix_cache_queries_total=0, prefix_cache_hits_total=0, block_size=16, max_num_seqs=64,
                   max_num_batched_tokens=2048, num_prefill_tokens_waiting=0)
POLICY = OverflowPolicy(enabled=True, max_waiting_per_replica=4.0, ttft_slo_s=0.5)


async def _scraped_table(stats: EngineStats) -> BackendTable:
    metrics = ServerMetrics("m", lambda: stats)

    async def ready(_):
        return web.Response(text="ok")

    async def scrape(_):
        return web.Response(body=metrics.render())
    app = web.Application()
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", scrape)
    runner, url = await serve(app)
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("e", url)])
    try:
        async with aiohttp.ClientSession() as session:
            await table.refresh(session, 5.0)
    finally:
        await runner.cleanup()
    return table


def _burst(table: BackendTable, n: int) -> list[str]:
    """n simultaneous requests, none finished: each decision sees the ones sent before it (as the proxy's
    pool_state does: totals of the table, the gateway's in-flight counts on top of the last scrape)."""
    targets = []
    for _ in range(n):
        t = table.totals()
        d = overflow_decision(PoolState(t.ready, t.waiting), POLICY, RequestInfo(tokens=40, arrived_at=0.0), 0.0)
        targets.append(d.target)
        if d.target == "local":
            table.pick(frozenset()).in_flight += 1
    return targets


async def test_a_cold_pool_sends_the_first_burst_to_the_engines_batch():
    table = await _scraped_table(IDLE)
    assert table.backends["e"].ready and table.backends["e"].capacity == 64  # known before any load
    targets = _burst(table, 150)
    # The engine runs 64 at once; 4 more may queue there (max_waiting_per_replica); the rest overflow.
    assert targets.count("local") == 64 + 4
    assert targets[:68] == ["local"] * 68 and set(targets[68:]) == {"overflow"}


async def test_without_the_capacity_info_the_gateway_learns_capacity_from_the_load_it_saw():
    # An engine that does not export it (an older vLLM): capacity is the most requests seen running, so a
    # scrape that caught 4 running makes the gateway think the 5th request queues (the behaviour of issue 6).
    table = await _scraped_table(IDLE)
    e = table.backends["e"]
    e.max_num_seqs, e.seen_running = 0.0, 4.0
    assert _burst(table, 150).count("local") == 4 + 4


async def test_the_prefill_backlog_and_rate_are_read_from_the_scrape_and_the_backlog_raised_by_own_requests():
    busy = EngineStats(**{**vars(IDLE), "num_prefill_tokens_waiting": 6000, "prefill_tokens_per_s": 12_000.0})
    table = await _scraped_table(busy)
    e = table.backends["e"]
    assert e.prefill_waiting == 6000 and e.backlog == 6000 and e.prefill_rate == 12_000.0
    e.pending_tokens = 9000  # sent since the scrape, no first byte yet
    assert e.backlog == 9000
    assert (await _scraped_table(IDLE)).backends["e"].prefill_rate == 0.0  # no prefill timed yet


def test_the_prediction_takes_each_engines_own_rate_and_the_learned_one_where_an_engine_exports_none():
    """a exports 4000 prompt tokens/s, b (a runtime without the gauge) none; the gateway's answers showed 1000."""
    config = GatewayConfig(backends={"static": ["http://a", "http://b"]}, slo={"ttft_ms": 500},
                           overflow={"enabled": True, "base_url": "http://api/v1"})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    for b in table.backends.values():
        b.ready = True
    a, b = table.backends["a"], table.backends["b"]
    a.prefill_rate = 4000.0
    gw = Gateway(config, table, GatewayMetrics(), local=None, remote=None)
    gw.prefill_rate = 1000.0

    def predicted(backend, uncached):
        return gw.pool_state(frozenset(), False, BackendChoice(backend, uncached, 0.0, 0.0)).predicted_ttft_s
    assert predicted(a, 2000) == pytest.approx(0.5)  # nothing ahead: its own prompt at the engine's rate
    a.pending_tokens = 2000
    assert predicted(a, 2000) == pytest.approx(1.0)
    assert predicted(b, 2000) is None  # nothing ahead and only a learned rate: no prediction
    b.pending_tokens = 2000
    assert predicted(b, 2000) == pytest.approx(4.0)


def test_the_overflow_rule_predicts_ttft_where_routing_would_send_the_request():
    """Not from the least backlog in the pool: an engine with nothing ahead but a full batch loses the pick to one
    with a long prompt ahead, and the request's TTFT is that engine's (2000 + 100 tokens at 1000 tokens/s: over
    a 0.5 s SLO, so it overflows; from the least backlog it would have stayed local, predicted at nothing)."""
    config = GatewayConfig(backends={"static": ["http://a", "http://b"]}, slo={"ttft_ms": 500},
                           overflow={"enabled": True, "base_url": "http://api/v1"})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    for b in table.backends.values():
        b.ready, b.max_num_seqs = True, 64.0
    table.backends["a"].in_flight = 60
    table.backends["b"].pending_tokens = 2000
    gw = Gateway(config, table, GatewayMetrics(), local=None, remote=None)
    gw.prefill_rate = 1000.0
    choice = table.choose(frozenset(), [], 100)
    pool = gw.pool_state(frozenset(), False, choice)
    assert choice.backend.id == "b" and pool.predicted_ttft_s == pytest.approx(2.1)
    decision = overflow_decision(pool, config.overflow_policy(), RequestInfo(tokens=140, arrived_at=0.0), 0.0)
    assert (decision.target, decision.reason) == ("overflow", "predicted_ttft")
