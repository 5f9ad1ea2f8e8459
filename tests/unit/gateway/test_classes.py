"""SLO classes: which class a request is of (classes.py), the class's overflow rule and TTFT SLO in the overflow
rule, and, through the proxy over real HTTP on 127.0.0.1, each class's overflow rule applied and its priority sent to
the engine, and each class's count of requests in flight until its answer is sent. One stand-in server plays the
local engine (/v1/...) and the overflow API (/ext/v1/...) and records the bodies each got."""

import json
import random

import aiohttp
import pytest
from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.classes import request_class
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.routing import RoutingWeights
from floodway.operator.gateway.upstream import UpstreamClient
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.models import SLOClassSpec
from pydantic import ValidationError

from tests.unit.gateway.stand_in import completions_stand_in

CLASSES = {c.name: c for c in (SLOClassSpec(name="interactive", priority=0, ttft_ms=300),
                               SLOClassSpec(name="standard", priority=5),
                               SLOClassSpec(name="batch", priority=10, overflow=False))}


def test_a_request_is_of_its_tenants_class_and_may_only_pick_a_lower_one():
    assert request_class(CLASSES, "standard", "").chosen.name == "standard"
    assert request_class(CLASSES, None, "").chosen is None  # no class: the service's own rules
    assert request_class(CLASSES, "standard", "batch").chosen.name == "batch"
    assert request_class(CLASSES, "standard", "standard").chosen.name == "standard"
    up = request_class(CLASSES, "standard", "interactive")
    assert (up.chosen, up.status) == (None, 403) and "lower" in up.error
    unknown = request_class(CLASSES, "standard", "gold")
    assert unknown.status == 400 and "gold" in unknown.error
    assert request_class(CLASSES, None, "interactive").chosen.name == "interactive"  # priority 0: not above none
    vip = {"vip": SLOClassSpec(name="vip", priority=-1)}
    assert request_class(vip, None, "vip").status == 403


def test_the_class_sets_the_overflow_rule_and_the_ttft_slo():
    policy = OverflowPolicy(enabled=True, ttft_slo_s=0.5)
    slow = PoolState(ready=1, predicted_ttft_s=1.0)
    assert overflow_decision(slow, policy, RequestInfo(10, 0.0), 0.0).target == "overflow"
    assert overflow_decision(slow, policy, RequestInfo(10, 0.0, ttft_slo_s=5.0), 0.0).target == "local"
    stays = overflow_decision(PoolState(ready=1, waiting=10), policy, RequestInfo(10, 0.0, class_local=True), 0.0)
    assert (stays.target, stays.reason) == ("local", "class_local")
    assert overflow_decision(PoolState(ready=0), policy, RequestInfo(10, 0.0, class_local=True), 0.0).target == "hold"


def test_classes_in_the_spec_are_unique_and_tenants_name_declared_ones():
    base = {"model": "m", "classes": [{"name": "batch", "priority": 10, "overflow": False}]}
    spec = InferenceServiceSpec.model_validate({**base, "gateway": {"tenants": {"default": {"defaultClass": "batch"}}}})
    assert spec.classes[0].priority == 10
    with pytest.raises(ValidationError, match="must be unique"):
        InferenceServiceSpec.model_validate({**base, "classes": base["classes"] * 2})
    with pytest.raises(ValidationError, match="defaultClass must name one of"):
        InferenceServiceSpec.model_validate({**base, "gateway": {"tenants": {"limits": [
            {"name": "t", "defaultClass": "gold"}]}}})


async def _never_disconnects() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _discard(message: dict) -> None:
    pass


async def _answers(url: str, policy: str, asks: list[str]) -> list[tuple[int, bytes | None]]:
    """(status, backend header) per request asking for each class ("": none) through a gateway whose one engine is
    ready but queued past the overflow threshold; the tenant's class is standard."""
    config = GatewayConfig.model_validate({
        "served_models": ["base"], "backends": {"static": [url]}, "engine_scheduling_policy": policy,
        "classes": [c.model_dump() for c in CLASSES.values()],
        "tenants": {"default": {"default_class": "standard"}},
        "overflow": {"enabled": True, "base_url": url + "/ext/v1", "model": "api", "max_waiting_per_replica": 1}})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([(url, url)])
    table.backends[url].ready, table.backends[url].waiting = True, 5.0
    local, out, metrics = UpstreamClient(2.0, 10.0), [], GatewayMetrics()
    async with aiohttp.ClientSession() as remote:
        gateway = Gateway(config, table, metrics, local, remote)
        for ask in asks:
            body = json.dumps({"model": "base", "prompt": "hi", "priority": -100}).encode()  # a client's own: ignored
            wrapped = await gateway.handle("/v1/completions", body, {"x-floodway-class": ask} if ask else {},
                                           "someone")
            answer = getattr(wrapped, "answer", wrapped)  # an admitted tenant's answer comes wrapped (tenant_gate.py)
            out.append((answer.status_code, dict(getattr(answer, "raw_headers", [])).get(b"x-floodway-backend")))
            if answer.status_code == 200:  # in flight for its class until the answer is sent
                in_flight = metrics.class_in_flight.labels(ask or "standard")._value
                assert in_flight.get() == 1
                await wrapped({"type": "http"}, _never_disconnects, _discard)
                assert in_flight.get() == 0
    local.close()
    assert metrics.class_requests.labels("batch")._value.get() == asks.count("batch")
    return out


async def test_each_class_gets_its_overflow_rule_and_its_priority_at_the_engine():
    seen: list[tuple[str, dict]] = []
    runner, url = await completions_stand_in(seen)
    try:
        got = await _answers(url, "priority", ["", "batch", "interactive", "gold"])
        assert got[0] == (200, b"overflow")  # standard may overflow: queued past the threshold, it does
        assert got[1] == (200, url.encode())  # batch may not: local, and last in the engine's queue
        assert [s for s, _ in got[2:]] == [403, 400]  # above its class, unknown: refused before routing
        assert seen[0][0] == "/ext/v1/completions" and "priority" not in seen[0][1]  # not an OpenAI field
        assert seen[1] == ("/v1/completions", {"model": "base", "prompt": "hi", "priority": 10})
        seen.clear()
        await _answers(url, "fcfs", ["batch"])  # engines that refuse priorities get the body as sent
        assert seen[0][1]["priority"] == -100
    finally:
        await runner.cleanup()
