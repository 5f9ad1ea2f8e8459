import asyncio
import random

import aiohttp
import pytest
from aiohttp import web
from floodway.operator.gateway.backends import MISSES_UNREADY, Backend, BackendTable, parse_engine_load
from floodway.operator.gateway.k8s import endpoints_from_slices
from floodway.operator.gateway.routing import PrefixPolicy, RoutingWeights
from floodway.operator.gateway.ttft import SlotHold

from tests.unit.gateway.stand_in import serve

METRICS = """# HELP vllm:num_requests_waiting Waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 3.0
vllm:num_requests_waiting{model_name="b"} 1.0
# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 8.0
# HELP vllm:kv_cache_usage_perc KV.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.25
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="a"} 2.0
# TYPE vllm:request_success counter
vllm:request_success_total{finished_reason="stop",model_name="a"} 5.0
vllm:request_success_total{finished_reason="length",model_name="a"} 2.0
"""


def test_parse_engine_load_sums_labels_and_defaults_to_zero():
    none = {"max_num_seqs": 0.0, "kv_tokens": 0.0, "prefill_waiting": 0.0, "prefill_rate": 0.0}
    assert parse_engine_load(METRICS) == {"waiting": 4.0, "running": 8.0, "kv_usage": 0.25, "finished": 7.0, **none}
    assert parse_engine_load("") == {"waiting": 0.0, "running": 0.0, "kv_usage": 0.0, "finished": 0.0, **none}


def test_table_keeps_state_of_known_backends_and_totals_ready_ones():
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    table.backends["a"].ready, table.backends["a"].in_flight = True, 2
    table.backends["a"].waiting, table.backends["a"].in_flight_at_scrape = 1.0, 1
    table.set_endpoints([("a", "http://a2"), ("c", "http://c")])
    assert set(table.backends) == {"a", "c"} and table.backends["a"].in_flight == 2
    assert table.backends["a"].url == "http://a2"
    totals = table.totals()
    assert (totals.ready, totals.waiting) == (1, 2.0)  # one more sent since the scrape while queueing
    assert table.pick(frozenset()).id == "a"
    assert table.pick(frozenset({"a"})) is None
    table.mark_unready("a")
    assert table.totals().ready == 0


def test_endpoints_from_slices():
    slices = [
        {"ports": [{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
         "endpoints": [
             {"addresses": ["10.0.0.1"], "conditions": {"ready": True}, "targetRef": {"name": "engine-0"}},
             {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},
             {"addresses": ["10.0.0.3"], "conditions": {"ready": False, "terminating": True}},
             {"addresses": ["fd00::4"], "conditions": {}},
         ]},
        {"ports": [{"name": "other", "port": 1}], "endpoints": [{"addresses": ["10.0.0.9"]}]},
    ]
    assert endpoints_from_slices(slices, "http") == [
        ("10.0.0.2:8000", "http://10.0.0.2:8000"), ("engine-0:8000", "http://10.0.0.1:8000"),
        ("fd00::4:8000", "http://[fd00::4]:8000")]
    assert endpoints_from_slices(slices, 9000)[0] == ("10.0.0.2:9000", "http://10.0.0.2:9000")
    assert endpoints_from_slices([{"ports": None, "endpoints": None}], None) == []


def test_choose_records_nothing_until_take():
    """The proxy reads the choice (the overflow rule predicts TTFT there) before the request is sent anywhere."""
    table = BackendTable(RoutingWeights(), random.Random(0), clock=lambda: 10.0)
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    for b in table.backends.values():
        b.ready = True
    table.backends["a"].pending_tokens = 4000  # a long prompt ahead on a: prefill counts in the load score
    choice = table.choose(frozenset(), [], 100)
    assert choice.backend.id == "b" and choice.uncached == 100
    assert [b.recent_work for b in table.backends.values()] == [0.0, 0.0]
    table.take(choice)
    assert table.backends["b"].recent_work == choice.recent_work > 0 and table.backends["b"].recent_at == 10.0
    assert table.backends["a"].recent_work == 0.0


def test_a_backends_admission_wait_reads_its_batch_and_kv_cache():
    b = Backend("a", "http://a", ready=True, running=4, kv_usage=0.9, max_num_seqs=64, kv_tokens=100_000,
                hold=SlotHold(slot_s=40.0, finished=10.0))  # 4 s a request
    assert b.admission_wait_s(2000) == 0.0  # 10k free: room for its prompt
    b.pending_tokens = 12_000  # prompts the gateway sent since without a first byte: they take the free blocks first
    assert b.admission_wait_s(2000) == pytest.approx(4000 / 90_000 * 4.0)
    b.kv_tokens = 0.0  # an engine that exports no cache size (vllm:cache_config_info): no KV wait predicted
    assert b.admission_wait_s(2000) == 0.0


PROBE_S = 0.5  # the probe timeout of the test below: a stand-in in this process answers well within it on a busy CPU


async def test_a_slow_probe_is_load_and_only_misses_in_a_row_or_a_refusal_take_a_backend_out():
    """A busy engine answering its probe late stays in rotation, with what it holds, until MISSES_UNREADY probes in a
    row time out; a good probe resets the count; a refused connection is a dead engine, out at once."""
    slow = {"on": False}

    async def probe(_):
        if slow["on"]:
            await asyncio.sleep(4 * PROBE_S)  # well past the probe's timeout
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/ready", probe)
    app.router.add_get("/metrics", probe)
    runner, url = await serve(app)
    table = BackendTable(RoutingWeights(), random.Random(0), prefix=PrefixPolicy())
    table.set_endpoints([("e", url)])
    try:
        async with aiohttp.ClientSession() as session:
            await table.refresh(session, PROBE_S)
            table.index.record("e", [1, 2, 3])
            slow["on"] = True
            for _ in range(MISSES_UNREADY - 1):
                await table.refresh(session, PROBE_S)
                assert table.backends["e"].ready and table.index.size("e") == 3
            slow["on"] = False
            await table.refresh(session, PROBE_S)  # answered: the count starts again
            slow["on"] = True
            for _ in range(MISSES_UNREADY - 1):
                await table.refresh(session, PROBE_S)
            assert table.backends["e"].ready
            await table.refresh(session, PROBE_S)
            assert not table.backends["e"].ready and table.index.size("e") == 0
            slow["on"] = False
            await table.refresh(session, PROBE_S)
            assert table.backends["e"].ready
            await runner.cleanup()  # nothing listens there now: refused
            await table.refresh(session, PROBE_S)
            assert not table.backends["e"].ready
    finally:
        await runner.cleanup()
