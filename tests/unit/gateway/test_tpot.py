"""A streamed answer's TPOT as the gateway counts it (tpot.py, attainment.py): the events of an OpenAI stream, their
mean gap, and through the proxy with an injected clock, each answer counted against its class's TPOT SLO (else the
service's) by tenant and class once its stream ends whole; a failed or abandoned stream is not counted."""

import asyncio
import json
import random

from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.payload import sse_error_event
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.routing import RoutingWeights
from floodway.operator.gateway.tpot import choice_events, mean_gap_s
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse

from tests.unit.gateway.test_fair_share import Clock


def event(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": text}]}).encode() + b"\n\n"


def test_the_events_that_carry_choices_and_their_mean_gap():
    assert choice_events(event("a") + event("b")) == 2
    assert choice_events(b"data: [DONE]\n\n") == 0
    assert choice_events(sse_error_event("gone", "backend_failed")) == 0
    assert choice_events(b"") == 0
    assert mean_gap_s(1.0, 1.5, 3) == 0.25
    assert mean_gap_s(1.0, 1.0, 1) is None


def _gateway(clock: Clock, gaps: list[float], end: bytes = b"data: [DONE]\n\n"):
    """A gateway with classes fast (tpotMs 50) and plain (the service's slo.tpotMs, 200) whose engine stand-in
    streams an event, then one more after each of `gaps` seconds (on the clock), then `end`."""
    config = GatewayConfig.model_validate({
        "served_models": ["base"], "backends": {"static": ["http://engine"]}, "slo": {"tpot_ms": 200},
        "classes": [{"name": "fast", "tpot_ms": 50}, {"name": "plain"}],
        "tenants": {"default": {"default_class": "plain"}, "limits": [{"name": "quick", "default_class": "fast"}]}})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("http://engine", "http://engine")])
    table.backends["http://engine"].ready = True
    gateway = Gateway(config, table, GatewayMetrics(), None, None, clock=clock)

    async def stream():
        yield event("0")
        for i, gap in enumerate(gaps):
            clock.now += gap
            yield event(str(i + 1))
        yield end

    async def local(choice, path, body, stream_, t0, predicted):
        return StreamingResponse(stream(), 200)

    gateway._local = local
    return gateway


async def _stream(gateway: Gateway, tenant: str, disconnect_after: int | None = None) -> None:
    body = json.dumps({"model": "base", "prompt": "p", "max_tokens": 10, "stream": True}).encode()
    answer = await gateway.handle("/v1/completions", body, {}, tenant)
    sent = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])
            if disconnect_after is not None and len(sent) >= disconnect_after:
                raise OSError("client gone")

    try:
        await answer({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
    except ClientDisconnect:  # what starlette raises when a send fails
        assert disconnect_after is not None


def counts(gateway: Gateway) -> dict:
    m = gateway.metrics
    return {(c._name, labels): child._value.get() for c in (m.tenant_tpot_measured, m.tenant_tpot_met,
                                                            m.class_tpot_measured, m.class_tpot_met)
            for labels, child in c._metrics.items()}


async def test_each_streamed_answer_counts_against_its_classs_tpot_slo_else_the_services():
    clock = Clock()
    gaps = [0.04, 0.08, 0.06]  # mean 60 ms: over fast's 50, within the service's 200
    await _stream(_gateway(clock, gaps), "quick")
    await _stream(gw := _gateway(clock, gaps), "someone")
    assert counts(gw) == {("floodway_gateway_tenant_tpot_measured", ("someone",)): 1,
                          ("floodway_gateway_tenant_tpot_slo_met", ("someone",)): 1,
                          ("floodway_gateway_class_tpot_measured", ("plain",)): 1,
                          ("floodway_gateway_class_tpot_slo_met", ("plain",)): 1}
    gw = _gateway(clock, gaps)
    await _stream(gw, "quick")
    assert counts(gw) == {("floodway_gateway_tenant_tpot_measured", ("quick",)): 1,
                          ("floodway_gateway_class_tpot_measured", ("fast",)): 1}
    gw = _gateway(clock, [0.01, 0.02])  # mean 15 ms: within fast's 50
    await _stream(gw, "quick")
    assert counts(gw)[("floodway_gateway_class_tpot_slo_met", ("fast",))] == 1


async def test_a_stream_that_failed_or_lost_its_client_is_not_counted():
    clock = Clock()
    gw = _gateway(clock, [0.01, 0.01], end=sse_error_event("backend failed mid-stream", "backend_failed"))
    await _stream(gw, "quick")
    gw2 = _gateway(clock, [0.01, 0.01])
    await _stream(gw2, "quick", disconnect_after=2)
    one_event = _gateway(clock, [])
    await _stream(one_event, "quick")
    assert counts(gw) == counts(gw2) == counts(one_event) == {}
