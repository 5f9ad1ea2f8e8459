"""Tenants with real processes: the gateway's tenants file names each client's tenant, a tenant over its requests per
minute gets 429 with Retry-After and OpenAI's x-ratelimit-* headers (the official client raises RateLimitError)
while another tenant is served, and a concurrency slot comes back when a client leaves mid-stream or the request
fails; a request picks a lower SLO class by header, never a higher one; short of capacity, a class waits in the
gateway's queue within its queueLimit and is refused past it; streamed answers count toward their tenant's and
class's TTFT attainment. Limits small enough (1 request per minute, 1 at a time) that no timing decides an outcome."""

import asyncio
import json

import httpx
import openai
import pytest
from floodway.operator import procs

pytestmark = pytest.mark.slow

MODEL = "floodway/tiny-llama"
BODY = {"model": MODEL, "prompt": "x", "max_tokens": 1}


def _auth(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
def tenants_file(tmp_path):
    path = tmp_path / "tenants"
    path.write_text("# key tenant\nsk-alpha alpha\nsk-beta beta\n")
    return str(path)


def test_a_tenant_over_its_rate_gets_429_with_the_headers_while_another_is_served(engines, gateway, tenants_file,
                                                                                  tmp_path, metric, validate_reply):
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-plain\n")  # a client key of auth.tokens_file: tenant anonymous
    gw = gateway({"backends": {"static": [engines[0].url]}, "served_models": [MODEL],
                  "auth": {"tokens_file": str(tokens)},
                  "tenants": {"keys_file": tenants_file, "limits": [{"name": "alpha", "max_requests_per_minute": 1}]}})
    url = gw.url + "/v1/completions"
    first = httpx.post(url, json=BODY, headers=_auth("sk-alpha"), timeout=60)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-requests"] == "1" and first.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    over = httpx.post(url, json=BODY, headers=_auth("sk-alpha"), timeout=60)
    assert over.status_code == 429 and "x-floodway-backend" not in over.headers  # refused before routing
    assert 1 <= int(over.headers["retry-after"]) <= 60 and over.headers["x-ratelimit-remaining-requests"] == "0"
    error = validate_reply(over)["error"]
    assert error["code"] == "rate_limit_exceeded" and "requests per minute" in error["message"]
    other = httpx.post(url, json=BODY, headers=_auth("sk-beta"), timeout=60)
    assert other.status_code == 200 and "x-ratelimit-limit-requests" not in other.headers  # beta has no limit
    assert httpx.post(url, json=BODY, headers=_auth("sk-nobody"), timeout=60).status_code == 401
    assert httpx.post(url, json=BODY, headers=_auth("tok-plain"), timeout=60).status_code == 200
    assert httpx.get(gw.url + "/v1/models", headers=_auth("sk-beta"), timeout=60).status_code == 200
    assert httpx.get(gw.url + "/v1/models", timeout=60).status_code == 401

    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-alpha", max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        client.completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert refused.value.response.headers["x-ratelimit-limit-requests"] == "1"
    served = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-beta", max_retries=0)
    assert served.chat.completions.create(model=MODEL, max_tokens=1,
                                          messages=[{"role": "user", "content": "x"}]).choices
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="alpha", limit="requests_per_minute") == 2
    assert metric(gw.url, "floodway_gateway_tenant_requests_total", tenant="alpha") == 1
    assert metric(gw.url, "floodway_gateway_tenant_requests_total", tenant="beta") == 2
    assert metric(gw.url, "floodway_gateway_tenant_tokens_total", tenant="beta") > 0
    assert metric(gw.url, "floodway_gateway_tenant_requests_total", tenant="anonymous") == 1


def test_a_concurrency_slot_comes_back_when_the_client_leaves_mid_stream(engines, gateway, tenants_file, metric):
    local_a = engines[0]
    gw = gateway({"backends": {"static": [local_a.url]}, "served_models": [MODEL],
                  "tenants": {"keys_file": tenants_file, "default": {"max_concurrent_requests": 1}}})
    url = gw.url + "/v1/completions"
    long = {"model": MODEL, "prompt": "a very long story", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url, json=long, headers=_auth("sk-alpha"), timeout=120) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: closing this iterator would close the stream
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[len("data: "):])["choices"]
        busy = httpx.post(url, json=BODY, headers=_auth("sk-alpha"), timeout=60)
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert "concurrent requests" in busy.json()["error"]["message"]
        assert httpx.post(url, json=BODY, headers=_auth("sk-beta"), timeout=60).status_code == 200  # its own slot
        r.close()  # the client leaves, ~2000 tokens early
    # The slot is back once the gateway noticed, long before the stream would have ended (~100 s at 50 ms a step).
    procs.wait_until(lambda: metric(gw.url, "floodway_gateway_tenant_in_flight", tenant="alpha") == 0
                     and metric(local_a.url, "vllm:num_requests_running") == 0, 30, "alpha's slot free again")
    assert httpx.post(url, json=BODY, headers=_auth("sk-alpha"), timeout=60).status_code == 200
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="alpha", limit="concurrent_requests") == 1


def test_a_failed_request_frees_its_slot(gateway, tenants_file, metric):
    """No engine listens at the backend's address and there is no overflow: each request gets the gateway's own 429
    (no capacity), and the tenant's single slot is free again for the next one."""
    gw = gateway({"backends": {"static": [f"http://127.0.0.1:{procs.free_port()}"]}, "served_models": [MODEL],
                  "overflow": {"hold_timeout_s": 0},
                  "tenants": {"keys_file": tenants_file, "default": {"max_concurrent_requests": 1}}},
                 ready_path="/health")
    for _ in range(3):
        r = httpx.post(gw.url + "/v1/completions", json=BODY, headers=_auth("sk-alpha"), timeout=60)
        assert r.status_code == 429 and r.json()["error"]["code"] == "capacity_exceeded", r.text
    assert metric(gw.url, "floodway_gateway_tenant_in_flight", tenant="alpha") == 0
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="alpha") == 0


def test_a_request_picks_a_lower_class_by_header_never_a_higher_one(engines, gateway, tenants_file, metric):
    gw = gateway({"backends": {"static": [engines[0].url]}, "served_models": [MODEL],
                  "classes": [{"name": "interactive", "priority": 0}, {"name": "standard", "priority": 5},
                              {"name": "batch", "priority": 10, "overflow": False}],
                  "tenants": {"keys_file": tenants_file, "default": {"default_class": "standard"},
                              "limits": [{"name": "beta", "default_class": "interactive"}]}})
    url = gw.url + "/v1/completions"

    def post(key: str, klass: str | None = None) -> httpx.Response:
        return httpx.post(url, json=BODY, timeout=60, headers={**_auth(key), **({"x-floodway-class": klass}
                                                                                   if klass else {})})

    assert post("sk-alpha").status_code == 200 and post("sk-alpha", "batch").status_code == 200
    above = post("sk-alpha", "interactive")
    assert above.status_code == 403 and above.json()["error"]["code"] == "class_not_allowed"
    assert post("sk-alpha", "gold").status_code == 400
    assert post("sk-beta", "interactive").status_code == 200
    assert metric(gw.url, "floodway_gateway_class_requests_total", **{"class": "standard"}) == 1
    assert metric(gw.url, "floodway_gateway_class_requests_total", **{"class": "batch"}) == 1
    assert metric(gw.url, "floodway_gateway_class_requests_total", **{"class": "interactive"}) == 1


def test_a_class_waits_within_its_queue_limit_and_is_refused_past_it(gateway, tenants_file, metric):
    """No engine listens at the backend's address and the classes may not overflow: alpha's class (tools) waits in the
    gateway's queue, one at a time; a second gets 429 at once, as does every request of beta's class (batch,
    queueLimit 0). The held one gets 429 at the hold timeout (10 s: the second is sent long before)."""
    gw = gateway({"backends": {"static": [f"http://127.0.0.1:{procs.free_port()}"]}, "served_models": [MODEL],
                  "overflow": {"hold_timeout_s": 10},
                  "classes": [{"name": "tools", "overflow": False, "queue_limit": 1},
                              {"name": "batch", "priority": 10, "overflow": False, "queue_limit": 0}],
                  "tenants": {"keys_file": tenants_file, "default": {"default_class": "tools"},
                              "limits": [{"name": "beta", "default_class": "batch"}]}},
                 ready_path="/health")
    batch = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-beta", max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        batch.completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert refused.value.response.headers["retry-after"] == "1" and "class_queue_full" in refused.value.message

    async def one_held_then_one_more() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            held = asyncio.create_task(client.post(gw.url + "/v1/completions", json=BODY, headers=_auth("sk-alpha")))
            while await asyncio.to_thread(metric, gw.url, "floodway_gateway_hold_queue_depth") != 1:
                await asyncio.sleep(0.05)
            return await client.post(gw.url + "/v1/completions", json=BODY, headers=_auth("sk-alpha")), await held

    full, late = asyncio.run(asyncio.wait_for(one_held_then_one_more(), 60))
    assert full.status_code == 429 and "class_queue_full" in full.json()["error"]["message"]
    assert late.status_code == 429 and "hold_timeout" in late.json()["error"]["message"]
    assert metric(gw.url, "floodway_gateway_hold_queue_depth") == 0
    assert metric(gw.url, "floodway_gateway_tenant_in_flight", tenant="alpha") == 0


def test_streamed_answers_count_toward_their_tenants_and_classs_ttft_and_tpot_attainment(engines, gateway,
                                                                                         tenants_file, metric):
    """SLOs of a minute, which a short answer of the tiny model meets whatever the machine's load, and a class with
    a TPOT SLO of 1 ms, which no answer of an engine sleeping 50 ms a step (LOCAL_ARGS) meets."""
    gw = gateway({"backends": {"static": [engines[0].url]}, "served_models": [MODEL],
                  "classes": [{"name": "tools", "ttft_ms": 60000, "tpot_ms": 60000},
                              {"name": "strict", "ttft_ms": 60000, "tpot_ms": 1}],
                  "tenants": {"keys_file": tenants_file, "default": {"default_class": "tools"}}})
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-alpha", max_retries=0)
    # Greedy, so each answer is four events: a sampled one may end early or hold partial bytes back, and an answer
    # of one event has no TPOT to count.
    for headers in ({}, {"x-floodway-class": "strict"}):
        assert len(list(client.completions.create(model=MODEL, prompt="x", max_tokens=4, temperature=0, stream=True,
                                                  extra_headers=headers))) == 4
    client.completions.create(model=MODEL, prompt="x", max_tokens=1)  # whole: not a TTFT, not measured
    for name, labels, ttft, tpot in (("tenant", {"tenant": "alpha"}, 2, 1), ("class", {"class": "tools"}, 1, 1),
                                     ("class", {"class": "strict"}, 1, 0)):
        assert metric(gw.url, f"floodway_gateway_{name}_ttft_measured_total", **labels) == ttft
        assert metric(gw.url, f"floodway_gateway_{name}_ttft_slo_met_total", **labels) == ttft
        assert metric(gw.url, f"floodway_gateway_{name}_tpot_measured_total", **labels) == ttft
        assert metric(gw.url, f"floodway_gateway_{name}_tpot_slo_met_total", **labels) == tpot


def test_classes_and_tenants_through_two_engines_and_the_overflow_api_with_the_official_client(
        engines, gateway, overflow_config, metric, tmp_path):
    """Issue 40's rules on real processes: two local engines (two sequences per 50 ms step, LOCAL_ARGS), the third
    engine standing in for the overflow API. A batch tenant's requests (class batch: may not overflow) fill the
    local queues past the overflow threshold and are all answered locally; an interactive tenant's requests sent
    while they queue overflow; a tenant over its rate gets RateLimitError while the others are never refused; each
    class's in-flight count is back to zero at the end."""
    local_a, local_b, _ = engines
    keys = tmp_path / "tenants"
    keys.write_text("sk-chat chat\nsk-jobs jobs\nsk-noisy noisy\n")
    gw = gateway(overflow_config() | {
        "classes": [{"name": "interactive", "priority": 0}, {"name": "batch", "priority": 10, "overflow": False}],
        "tenants": {"keys_file": str(keys), "default": {"default_class": "interactive"},
                    "limits": [{"name": "jobs", "default_class": "batch"},
                               {"name": "noisy", "max_requests_per_minute": 2}]}})

    def client(key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=120)

    async def backend(c: openai.AsyncOpenAI, max_tokens: int) -> str:
        raw = await c.completions.with_raw_response.create(model=MODEL, prompt="the river", max_tokens=max_tokens,
                                                           extra_body={"ignore_eos": True})
        assert raw.parse().choices[0].finish_reason == "length"
        return raw.headers["x-floodway-backend"]

    async def queued() -> None:  # the engines' own /metrics: waiting past the threshold on both
        while min(await asyncio.gather(*(asyncio.to_thread(metric, e.url, "vllm:num_requests_waiting")
                                         for e in (local_a, local_b)))) <= 2:
            await asyncio.sleep(0.02)

    async def run():
        jobs, chat, noisy = client("sk-jobs"), client("sk-chat"), client("sk-noisy")
        batch = [asyncio.create_task(backend(jobs, 24)) for _ in range(16)]
        await asyncio.wait_for(queued(), 60)
        interactive = await asyncio.gather(*(backend(chat, 4) for _ in range(4)))
        limited = await asyncio.gather(*(backend(noisy, 1) for _ in range(3)), return_exceptions=True)
        return await asyncio.gather(*batch), interactive, limited

    batch, interactive, limited = asyncio.run(run())
    assert set(batch) <= {local_a.url, local_b.url}  # batch stays local, however long the queue
    assert "overflow" in interactive
    assert sum(isinstance(x, openai.RateLimitError) for x in limited) == 1 and limited.count(local_a.url) + \
        limited.count(local_b.url) + limited.count("overflow") == 2
    assert metric(gw.url, "floodway_gateway_class_overflow_total", **{"class": "batch"}) == 0
    assert metric(gw.url, "floodway_gateway_class_overflow_total", **{"class": "interactive"}) == \
        interactive.count("overflow") + limited.count("overflow")
    assert metric(gw.url, "floodway_gateway_class_requests_total", **{"class": "batch"}) == 16
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="noisy") == 1
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="chat") == 0
    assert metric(gw.url, "floodway_gateway_tenant_rejected_total", tenant="jobs") == 0
    for klass in ("batch", "interactive"):
        assert metric(gw.url, "floodway_gateway_class_in_flight", **{"class": klass}) == 0
