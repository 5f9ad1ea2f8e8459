"""The proxy with real processes: streaming passthrough and the backend and gateway headers, errors in OpenAI shape,
client auth, an engine killed mid-run, and no ready backend (overflow for scale-from-zero, or 429)."""

import asyncio
import json
import os
import signal
import socket
import threading
import time

import httpx
import pytest
from floodway.operator import procs
from floodway.operator.bench.loadgen import send_at_rate
from floodway.operator.gateway.backends import parse_engine_load

pytestmark = pytest.mark.slow

MODEL = "floodway/tiny-llama"


def sse_events(text: str) -> list[str]:
    return [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]


def test_streams_pass_through_with_backend_header(engines, gateway, validate_reply):
    local_a = engines[0]
    gw = gateway({"backends": {"static": [local_a.url]}, "served_models": [MODEL]})
    body = {"model": MODEL, "prompt": "once upon a time", "max_tokens": 12, "temperature": 0, "stream": True}
    arrivals = []
    with httpx.stream("POST", gw.url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["x-floodway-backend"] == local_a.url
        assert r.headers["x-floodway-gateway"] == socket.gethostname()  # the replica that routed it
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.perf_counter(), line[6:]))
    direct = sse_events(httpx.post(local_a.url + "/v1/completions", json=body, timeout=120).text)
    events = [e for _, e in arrivals]
    validate_reply(gw.url + "/v1/completions", 200, "".join(f"data: {e}\n\n" for e in events))
    assert events[-1] == "[DONE]" and len(events) == len(direct)
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert text == "".join(json.loads(e)["choices"][0]["text"] for e in direct[:-1])  # greedy: same tokens
    assert arrivals[-1][0] > arrivals[0][0]  # chunks arrive as the engine makes them, not all at once

    plain = httpx.post(gw.url + "/v1/chat/completions", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert plain.status_code == 200 and validate_reply(plain)["object"] == "chat.completion"
    assert plain.headers["x-floodway-gateway"] == socket.gethostname()
    assert validate_reply(httpx.get(gw.url + "/v1/models"))["data"][0]["id"] == MODEL


def test_errors_keep_the_openai_shape(engines, gateway, validate_reply):
    gw = gateway({"backends": {"static": [engines[0].url]}, "served_models": [MODEL]})
    bad_json = httpx.post(gw.url + "/v1/completions", content=b"{not json", timeout=30)
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    unknown = httpx.post(gw.url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    own = httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": -1},
                     timeout=30)  # the engines' request models, run at the gateway: refused before routing
    assert own.status_code == 400 and "x-floodway-backend" not in own.headers
    assert own.json()["error"]["param"] == "max_tokens"
    relayed = httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 10**6},
                         timeout=30)  # only the engine knows its context: its own 400, passed through, not retried
    assert relayed.status_code == 400 and relayed.headers["x-floodway-backend"] == engines[0].url
    assert relayed.json()["error"]["code"] == "context_length_exceeded"
    wrong_method = httpx.get(gw.url + "/v1/completions", timeout=30)
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    nowhere = httpx.post(gw.url + "/v1/embeddings", json={"input": "x"}, timeout=30)
    assert nowhere.status_code == 404 and nowhere.json()["error"]["type"] == "not_found_error"
    unnamed = httpx.post(gw.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
    assert unnamed.status_code == 200 and unnamed.json()["model"] == MODEL  # as the engine serves it directly
    for r in (bad_json, unknown, own, relayed, wrong_method, nowhere, unnamed):
        validate_reply(r)


def test_client_auth_with_bearer_tokens(engines, gateway, tmp_path, validate_reply):
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alpha\ntok-beta\n")
    gw = gateway({"backends": {"static": [engines[0].url]}, "auth": {"tokens_file": str(tokens)}})
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
    none = httpx.post(gw.url + "/v1/completions", json=body, timeout=60)
    assert none.status_code == 401
    wrong = httpx.post(gw.url + "/v1/completions", json=body, headers={"authorization": "Bearer nope"}, timeout=60)
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    ok = httpx.post(gw.url + "/v1/completions", json=body, headers={"authorization": "Bearer tok-beta"}, timeout=60)
    assert ok.status_code == 200
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    chat_refused = httpx.post(gw.url + "/v1/chat/completions", json=chat, timeout=60)
    assert chat_refused.status_code == 401
    wrong_method = httpx.get(gw.url + "/v1/completions", timeout=60)
    assert wrong_method.status_code == 401  # the token is checked first
    for r in (none, wrong, ok, chat_refused, wrong_method):
        validate_reply(r)
    assert httpx.get(gw.url + "/metrics").status_code == 200  # scrapes and probes need no token


def test_killed_engine_loses_no_request_that_had_not_started_streaming(gateway, tmp_path_factory, metric,
                                                                      validate_reply):
    """Queues by configuration: two slow engines (two sequences each, each step at least 100 ms) get more than
    they can run, so requests wait on the victim when it is killed, whatever the machine's speed."""
    def slow_engine(name):
        port = procs.free_port()
        return procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", MODEL, "--host", "127.0.0.1", "--port",
                                                  str(port), "--max-num-seqs", "2", "--step-delay-ms", "100"],
                           port, timeout_s=300, log_path=str(tmp_path_factory.mktemp(name) / "engine.log"))

    survivor = slow_engine("survivor")
    victim = slow_engine("victim")
    try:
        # Load-only routing: every request shares one prompt, which prefix-aware routing would keep on its holder.
        gw = gateway({"backends": {"static": [victim.url, survivor.url]}, "scrape_interval_s": 0.2,
                      "routing": {"prefix_aware": False}})
        plain = {"model": MODEL, "prompt": "a long night", "max_tokens": 16, "ignore_eos": True}

        async def run():
            load = asyncio.gather(send_at_rate(gw.url + "/v1/completions", plain, 16, 8),
                                  send_at_rate(gw.url + "/v1/completions", {**plain, "stream": True}, 8, 4))
            async with httpx.AsyncClient() as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # kill once the victim holds several requests
                    state = (await client.get(gw.url + "/debug/state")).json()
                    if next(b for b in state["backends"] if b["id"] == victim.url)["in_flight"] >= 3:
                        break
                    await asyncio.sleep(0.05)  # polling period; the deadline bounds the wait
                else:
                    raise AssertionError("the victim never held 3 requests")
            victim.kill()
            return await load

        plain_results, stream_results = asyncio.run(run())
    finally:
        victim.kill()
        survivor.kill()
    assert all(r.status == 200 for r in plain_results), [(r.status, r.error, r.body[:300]) for r in plain_results
                                                         if r.status != 200]
    for r in plain_results:
        validate_reply(gw.url + "/v1/completions", r.status, r.body)
    for r in stream_results:  # a stream either completes or, if its backend died mid-way, ends with an error
        assert r.status == 200, (r.status, r.error)
        chunks = validate_reply(gw.url + "/v1/completions", r.status, r.body)
        assert sse_events(r.body)[-1] == "[DONE]" or chunks[-1]["error"]["code"] == "backend_failed", chunks[-3:]
    retried = metric(gw.url, "floodway_gateway_requests_total", backend=victim.url, outcome="retried")
    assert retried >= 1  # requests queued on the victim went to the survivor
    assert not next(b for b in httpx.get(gw.url + "/debug/state").json()["backends"] if b["id"] == victim.url)["ready"]


def test_no_ready_backend_overflows_or_answers_429(engines, gateway, metric, validate_reply):
    dead = f"http://127.0.0.1:{procs.free_port()}"
    external = engines[2]
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    cold = gateway({"backends": {"static": [dead]}, "overflow": {
        "enabled": True, "base_url": external.url + "/v1", "model": "ext"}})
    r = httpx.post(cold.url + "/v1/completions", json=body, timeout=60)  # scale-from-zero: the API serves
    assert r.status_code == 200 and r.headers["x-floodway-backend"] == "overflow"
    validate_reply(r)
    assert metric(cold.url, "floodway_gateway_overflow_total", reason="no_ready_backend") == 1

    closed = gateway({"backends": {"static": [dead]}, "overflow": {"hold_timeout_s": 1.0}}, ready_path="/health")
    assert httpx.get(closed.url + "/ready").status_code == 503
    started = time.monotonic()
    r = httpx.post(closed.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert 1.0 <= time.monotonic() - started < 10  # held up to its deadline, never hangs
    assert "hold_timeout" in validate_reply(r)["error"]["message"]


def test_an_engine_slower_than_the_request_timeout_gets_504_and_stays_in_rotation(engine, gateway, metric,
                                                                                 validate_reply):
    """A local engine that sends nothing for request_timeout_s is slow, not failed: the client gets 504 naming the
    timeout, nothing is retried (the work would start over elsewhere as late), the engine aborts it, and the
    backend stays in rotation; it used to be marked unready (here, with a 60 s scrape interval, for a minute).
    Slowness by configuration: each engine step takes at least 100 ms, so a whole answer of 32 tokens takes at
    least 3.2 s against a 1 s timeout, while a stream's chunks come every step."""
    slow = engine("slow-local", MODEL, "--step-delay-ms", "100")
    gw = gateway({"backends": {"static": [slow.url]}, "served_models": [MODEL], "scrape_interval_s": 60,
                  "request_timeout_s": 1.0, "overflow": {"hold_timeout_s": 1.0}})

    def ready() -> bool:
        return httpx.get(gw.url + "/debug/state", timeout=10).json()["backends"][0]["ready"]

    procs.wait_until(ready, 30, "the engine ready in the gateway")
    whole = httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 32,
                                                         "ignore_eos": True}, timeout=60)
    assert whole.status_code == 504 and whole.headers["x-floodway-backend"] == slow.url, whole.text
    assert validate_reply(whole)["error"]["code"] == "backend_timeout" and "request_timeout_s" in whole.text
    assert metric(gw.url, "floodway_gateway_requests_total", backend=slow.url, outcome="timed_out") == 1
    assert metric(gw.url, "floodway_gateway_requests_total", outcome="retried") == 0
    assert ready()
    procs.wait_until(lambda: metric(slow.url, "vllm:num_requests_running") == 0, 30, "the engine aborted it")
    with httpx.stream("POST", gw.url + "/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": "x", "max_tokens": 8, "ignore_eos": True, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["x-floodway-backend"] == slow.url
        assert r.read().decode().rstrip().endswith("data: [DONE]")
        validate_reply(r)


def test_a_client_leaving_a_stream_aborts_it_on_the_engine(engines, gateway, metric, validate_openai):
    local_a = engines[0]
    gw = gateway({"backends": {"static": [local_a.url]}, "served_models": [MODEL]})
    tokens_before = metric(local_a.url, "vllm:generation_tokens_total")
    body = {"model": MODEL, "prompt": "a very long story", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", gw.url + "/v1/completions", json=body, timeout=120) as r:
        first = next(line for line in r.iter_lines() if line.startswith("data: "))
    validate_openai(json.loads(first[len("data: "):]), "CreateCompletionStreamResponse")  # the one chunk read
    # The gateway closes its engine connection, so the engine stops.
    procs.wait_until(lambda: metric(gw.url, "floodway_gateway_requests_total", backend=local_a.url,
                                    outcome="client_disconnected") == 1
                     and metric(local_a.url, "vllm:num_requests_running") == 0, 30,
                     "the disconnect counted and the engine idle")
    assert metric(local_a.url, "vllm:generation_tokens_total") - tokens_before < 2000  # aborted, not finished


def test_a_chat_stream_queued_on_an_engine_that_dies_is_retried_elsewhere(engines, gateway, tmp_path_factory,
                                                                         metric, validate_reply):
    """The chat role chunk waits for the first token: until then nothing reached the gateway, which may still
    retry. Queued deterministically by configuration: the victim runs one sequence at a time, slowly
    (--max-num-seqs 1 --step-delay-ms), and is busy with a direct request; the survivor is frozen (unready)
    while the chat request is routed, thawed before the victim is killed."""
    survivor = engines[0]
    port = procs.free_port()
    victim = procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", MODEL, "--host", "127.0.0.1", "--port",
                                                str(port), "--max-num-seqs", "1", "--step-delay-ms", "100"],
                         port, timeout_s=300, log_path=str(tmp_path_factory.mktemp("victim") / "engine.log"))

    def backend(gw, url):
        return next(b for b in httpx.get(gw.url + "/debug/state", timeout=10).json()["backends"] if b["id"] == url)

    def engine_load(url):
        return parse_engine_load(httpx.get(url + "/metrics", timeout=10).text)

    def quietly(fn):
        try:
            fn()
        except httpx.HTTPError:
            pass  # the direct request dies with the victim

    chat, results = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
                     "stream": True}, {}

    def chat_through(gw):
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json=chat, timeout=120) as r:
            results["status"], results["backend"] = r.status_code, r.headers.get("x-floodway-backend")
            results["text"] = "".join(r.iter_text())
            results["events"] = sse_events(results["text"])

    try:
        gw = gateway({"backends": {"static": [victim.url, survivor.url]}, "served_models": [MODEL],
                      "scrape_interval_s": 0.2})
        os.kill(survivor.pid, signal.SIGSTOP)
        try:
            procs.wait_until(lambda: not backend(gw, survivor.url)["ready"], 30, "the frozen survivor unready")
            busy = threading.Thread(target=quietly, args=(lambda: httpx.post(victim.url + "/v1/completions", json={
                "model": MODEL, "prompt": "x", "max_tokens": 200, "ignore_eos": True}, timeout=120),), daemon=True)
            busy.start()
            procs.wait_until(lambda: engine_load(victim.url)["running"] == 1, 60, "the victim busy")
            client = threading.Thread(target=chat_through, args=(gw,), daemon=True)
            client.start()
            procs.wait_until(lambda: engine_load(victim.url)["waiting"] == 1, 60, "the chat request queued there")
        finally:
            os.kill(survivor.pid, signal.SIGCONT)
        procs.wait_until(lambda: backend(gw, survivor.url)["ready"], 30, "the survivor ready again")
        victim.kill()
        client.join(120)
    finally:
        victim.kill()
    events = results["events"]
    assert results["status"] == 200 and results["backend"] == survivor.url, results
    # No error event (an "error" key); the random model may well say "error" in its text.
    assert events[-1] == "[DONE]" and not any("error" in json.loads(e) for e in events[:-1]), events[-3:]
    validate_reply(gw.url + "/v1/chat/completions", 200, results["text"])
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1] if json.loads(e)["choices"]]
    assert deltas[0]["role"] == "assistant" and "".join(d.get("content") or "" for d in deltas)
    assert metric(gw.url, "floodway_gateway_requests_total", backend=victim.url, outcome="retried") == 1
