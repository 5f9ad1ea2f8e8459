"""The gateway's side of the OpenAI API (issue 18): every body and chunk it returns, from a local engine or the
overflow API, validated against the official spec's component schemas; local engines get a request's fields
unchanged, the overflow API only those the OpenAI API defines.

What each backend received cannot be read from a real engine, so two recording stand-ins (a small HTTP server in
this process, answering as an engine would) take that part; the rest runs against real engines."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from floodway.operator import procs

MODEL = "floodway/tiny-llama"
CHAT = [{"role": "user", "content": "Say something."}]
DEAD = "http://127.0.0.1:1"  # a local backend that is never ready: every request overflows


class StandIn(ThreadingHTTPServer):
    """Stand-in for an engine or an overflow API: records each POSTed JSON body and answers with a conforming
    non-streamed chat completion; probes and /metrics answer as a ready, idle engine."""

    daemon_threads = True

    def __init__(self):
        self.received: list[tuple[str, dict]] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._send(200, b"" if self.path == "/metrics" else b'{"status": "ready"}',
                   "text/plain" if self.path == "/metrics" else "application/json")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.received.append((self.path, body))
        answer = {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
                  "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                               "message": {"role": "assistant", "content": "ok", "refusal": None}}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
        self._send(200, json.dumps(answer).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def standin():
    servers = []

    def make() -> StandIn:
        servers.append(StandIn())
        return servers[-1]

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


# OpenAI's fields (some of them new in issue 18) and extras only vLLM-style engines know.
OPENAI_PART = {"model": MODEL, "messages": CHAT, "max_tokens": 4, "temperature": 0.5, "seed": 7, "user": "u",
               "stop": ["\n\n"], "logprobs": True, "presence_penalty": 0, "stream_options": None}
EXTRAS = {"top_k": 5, "ignore_eos": True, "stop_token_ids": [2], "min_tokens": 1, "repetition_penalty": 1.1}


def test_local_engines_get_every_field_and_the_overflow_api_only_openai_ones(gateway, standin, validate_openai):
    body = {**OPENAI_PART, **EXTRAS}
    local = standin()
    gw = gateway({"served_models": [MODEL], "scrape_interval_s": 0.2, "backends": {"static": [local.url]}})
    procs.wait_until(lambda: httpx.get(gw.url + "/ready").json()["ready_backends"] == 1, 30, "the stand-in ready")
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["x-floodway-backend"] != "overflow"
    validate_openai(r.json(), "CreateChatCompletionResponse")
    assert local.received == [("/v1/chat/completions", body)]

    remote = standin()
    gw = gateway({"served_models": [MODEL], "backends": {"static": [DEAD]},
                  "overflow": {"enabled": True, "base_url": remote.url + "/v1", "model": "remote-model",
                               "api_key_env": "OVERFLOW_KEY"}})
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["x-floodway-backend"] == "overflow"
    validate_openai(r.json(), "CreateChatCompletionResponse")
    assert remote.received == [("/v1/chat/completions", {**OPENAI_PART, "model": "remote-model"})]


def stream(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


def check_generation(url: str, model: str, validate_openai, validate_stream) -> None:
    """Completions and chat, streamed (with the usage chunk) and not, all valid against the spec."""
    for path, body, component, chunk in (
            ("/v1/completions", {"prompt": "Once upon", "logprobs": 0}, "CreateCompletionResponse",
             "CreateCompletionResponse"),
            ("/v1/chat/completions", {"messages": CHAT, "logprobs": True}, "CreateChatCompletionResponse",
             "CreateChatCompletionStreamResponse")):
        body = {**body, "model": model, "max_tokens": 4, "temperature": 0}
        r = httpx.post(url + path, json=body, timeout=120)
        assert r.status_code == 200, r.text
        validate_openai(r.json(), component)
        chunks = stream(url, path, {**body, "stream_options": {"include_usage": True}})
        validate_stream(chunks, chunk)
        assert chunks[-1]["usage"]["completion_tokens"] == r.json()["usage"]["completion_tokens"]


def check_models(url: str, validate_openai) -> None:
    validate_openai(httpx.get(url + "/v1/models").json(), "ListModelsResponse")
    card = httpx.get(f"{url}/v1/models/{MODEL}")
    assert card.status_code == 200 and card.json()["id"] == MODEL
    validate_openai(card.json(), "Model")
    missing = httpx.get(url + "/v1/models/no-such-model")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    validate_openai(missing.json(), "ErrorResponse")


def test_responses_through_the_gateway_conform(engines, gateway, validate_openai, validate_stream):
    local_a, _, external = engines
    # served_models from the config, and without it the engine's own answers relayed.
    for config in ({"served_models": [MODEL]}, {}):
        gw = gateway({**config, "scrape_interval_s": 0.2, "backends": {"static": [local_a.url]}})
        procs.wait_until(lambda g=gw: httpx.get(g.url + "/ready").json()["ready_backends"] == 1, 30, "engine ready")
        check_models(gw.url, validate_openai)
    check_generation(gw.url, MODEL, validate_openai, validate_stream)
    for body in ({"model": MODEL, "prompt": "x", "temperature": 9}, {"model": MODEL, "messages": []}):
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        r = httpx.post(gw.url + path, json=body)
        assert r.status_code == 400
        validate_openai(r.json(), "ErrorResponse")
    # Overflow: the real external engine's answers, relayed through the gateway.
    gw = gateway({"served_models": [MODEL], "backends": {"static": [DEAD]},
                  "overflow": {"enabled": True, "base_url": external.url + "/v1", "model": "ext",
                               "api_key_env": "OVERFLOW_KEY"}})
    check_generation(gw.url, MODEL, validate_openai, validate_stream)


def test_the_gateways_own_errors_conform(gateway, validate_openai):
    """Errors the gateway answers itself: wrong method, body too large, bad value, no backend and no overflow,
    a path it does not serve."""
    gw = gateway({"served_models": [MODEL], "backends": {"static": [DEAD]}, "max_body_bytes": 4096},
                 ready_path="/health")
    chat = {"model": MODEL, "messages": CHAT, "max_tokens": 2}
    answers = [httpx.get(gw.url + "/v1/chat/completions"),
               httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x" * 8000}),
               httpx.post(gw.url + "/v1/chat/completions", json={**chat, "temperature": 9}),
               httpx.post(gw.url + "/v1/chat/completions", json=chat, timeout=60),
               httpx.get(gw.url + "/v1/files")]
    assert [r.status_code for r in answers[:3]] == [405, 413, 400] and answers[3].status_code in (429, 503)
    assert answers[4].status_code == 404
    for r in answers:
        validate_openai(r.json(), "ErrorResponse")
