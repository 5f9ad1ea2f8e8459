"""Hostile input at a real gateway in front of real engines: every bad body gets the engines' own 400 naming
the field on both paths (local, and overflow, where nothing may reach the API), a body over the limit gets
413, a head over its limit 431, /debug/state is off unless configured, and none of it takes a backend out of
rotation."""

import http.server
import json
import socket
import threading

import httpx
import pytest
from floodway.operator import procs

pytestmark = pytest.mark.slow

MODEL = "floodway/tiny-llama"
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
M = b'"model": "floodway/tiny-llama", '
# (path, raw body, param, words the message must contain)
HOSTILE = [
    (CMPL, b'{' + M + b'"prompt": "a\\udcffb"}', "prompt", "lone surrogate U+DCFF"),
    (CMPL, b'{' + M + b'"prompt": "hi", "stop": "\\ud800"}', "stop", "lone surrogate U+D800"),
    (CHAT, b'{' + M + b'"messages": [{"role": "user", "content": "\\udfff"}]}', "messages.0.content",
     "lone surrogate"),
    (CMPL, b'{' + M + b'"prompt": "a\xffb"}', None, "utf-8"),
    (CMPL, b'{' + M + b'"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, "recursion"),
    (CMPL, b'{' + M + b'"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}", None, "digits"),
    (CMPL, b'{' + M + b'"prompt": "hi", "temperature": NaN}', "temperature", "finite"),
    (CMPL, b'{' + M + b'"prompt": "hi", "logprobs": 6}', "logprobs", "less than or equal to 5"),
    (CMPL, b'{' + M + b'"prompt": "hi", "n": 0}', "n", "greater than or equal to 1"),
    (CHAT, b'{' + M + b'"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}', "top_logprobs",
     "needs logprobs"),
    (CHAT, b'{' + M + b'"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", '
           b'"function": {}}]}', "tools.0.function.name", "Field required"),
    (CHAT, b'{' + M + b'"messages": [{"role": "user", "content": "x"}], "response_format": '
           b'{"type": "xml"}}', "response_format.type", "json_schema"),
]
VALID = {"model": MODEL, "prompt": "x", "max_tokens": 2}


def endless_head(url: str) -> bytes:
    """What a server answers a request head of 80 KB that is still unfinished."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-endless: " + b"a" * 80_000)
        return s.recv(100)


@pytest.mark.parametrize("route", ["local", "overflow"])
def test_bad_bodies_get_400_naming_the_field_on_every_path(engines, gateway, metric, route, validate_reply):
    local_a, _, external = engines
    if route == "local":
        gw = gateway({"backends": {"static": [local_a.url]}, "served_models": [MODEL], "scrape_interval_s": 0.2})
    else:  # no local replica: every request would go to the overflow API
        gw = gateway({"backends": {"static": [f"http://127.0.0.1:{procs.free_port()}"]}, "served_models": [MODEL],
                      "overflow": {"enabled": True, "base_url": external.url + "/v1", "model": "ext"}})
    for path, body, param, words in HOSTILE:
        r = httpx.post(gw.url + path, content=body, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 400, (body[:80], r.status_code, r.text[:300])
        err = validate_reply(r)["error"]
        assert err["param"] == param and words in err["message"], (body[:80], err)
    # A body over the limit: refused on its declared length, and while reading one without (chunked).
    big = b'{"prompt": "' + b"a" * (5 * 2**20) + b'"}'
    r = httpx.post(gw.url + CMPL, content=big, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413 and validate_reply(r)["error"]["code"] == "request_too_large"
    r = httpx.post(gw.url + CMPL, content=iter([b"a" * 2**20] * 6), timeout=60)
    assert r.status_code == 413
    validate_reply(r)
    # A head that does not end (one header, never finished) gets 431 at the gateway and at the engine.
    for url in (gw.url, local_a.url):
        assert endless_head(url).startswith(b"HTTP/1.1 431 "), url

    assert metric(gw.url, "floodway_gateway_overflow_total") == 0  # nothing reached the overflow API
    ok = httpx.post(gw.url + CMPL, json=VALID, timeout=60)  # and the next valid request is served as before
    assert ok.status_code == 200, ok.text
    validate_reply(ok)
    assert ok.headers["x-floodway-backend"] == (local_a.url if route == "local" else "overflow")
    if route == "local":
        backends = httpx.get(gw.url + "/debug/state", timeout=10).json()["backends"]
        assert [b["ready"] for b in backends] == [True]
        assert metric(gw.url, "floodway_gateway_requests_total", outcome="retried") == 0


def test_debug_state_is_off_by_default_and_behind_the_tokens_when_on(engines, gateway, tmp_path, validate_reply):
    gw = gateway({"backends": {"static": [engines[0].url]}}, debug_state=False)
    r = httpx.get(gw.url + "/debug/state", timeout=10)
    assert r.status_code == 404 and "debug_state" in validate_reply(r)["error"]["message"]
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alpha\n")
    gw = gateway({"backends": {"static": [engines[0].url]}, "auth": {"tokens_file": str(tokens)}})
    r = httpx.get(gw.url + "/debug/state", timeout=10)
    assert r.status_code == 401
    validate_reply(r)
    r = httpx.get(gw.url + "/debug/state", headers={"authorization": "Bearer tok-alpha"}, timeout=10)
    assert r.status_code == 200 and r.json()["backends"][0]["id"] == engines[0].url


class ScriptedEngine:
    """A stand-in engine (named as such): it answers each POST as its prompt says, including answers no real
    engine gives on demand (a request-specific 500 with an error body, a bare 500, a 502, a reset)."""

    ANSWERS = {
        "error-500": (500, b'{"error": {"message": "tokenizer choked", "type": "internal_error"}}'),
        "error-400": (400, b'{"error": {"message": "bad prompt", "type": "invalid_request_error"}}'),
        "crash-500": (500, b"Internal Server Error"),
        "bad-gateway": (502, b"<html>bad gateway</html>"),
        "unavailable": (503, b'{"error": {"message": "draining", "type": "service_unavailable"}}'),
    }

    def __init__(self):
        self.posts = 0
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._answer(200, b'{"status": "ready"}' if self.path == "/ready" else b"")

            def do_POST(self):
                engine.posts += 1
                prompt = json.loads(self.rfile.read(int(self.headers["content-length"])))["prompt"]
                if prompt == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._answer(*engine.ANSWERS[prompt])

            def _answer(self, status, body):
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # the reset answer breaks the handler's pipe on purpose

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_only_backend_failures_retry_or_take_a_backend_out_of_rotation(gateway, metric, validate_reply):
    """A request's own error (a 4xx, a 500 carrying an error body) is relayed as is, once (byte for byte: the
    stand-in's scripted bodies, not the gateway's); a connection reset, a 502/503 or a bare 500 is the backend
    failing: retried (here there is nowhere else: the gateway's own 429)."""
    engine = ScriptedEngine()
    try:
        gw = gateway({"backends": {"static": [engine.url]}, "scrape_interval_s": 0.2,
                      "overflow": {"hold_timeout_s": 1.0}})

        def send(prompt: str) -> httpx.Response:
            procs.wait_until(lambda: httpx.get(gw.url + "/debug/state", timeout=10).json()["backends"][0]["ready"],
                             30, "the stand-in engine ready in the gateway")
            before = engine.posts
            r = httpx.post(gw.url + CMPL, json={"prompt": prompt}, timeout=60)
            assert engine.posts == before + 1  # never retried on the same backend
            return r

        for prompt in ("error-500", "error-400"):
            status, body = ScriptedEngine.ANSWERS[prompt]
            r = send(prompt)
            assert (r.status_code, r.content, r.headers["x-floodway-backend"]) == (status, body, engine.url)
        assert metric(gw.url, "floodway_gateway_requests_total", outcome="retried") == 0
        assert metric(gw.url, "floodway_gateway_requests_total", outcome="client_error") == 2

        for n, prompt in enumerate(("crash-500", "bad-gateway", "unavailable", "reset"), start=1):
            r = send(prompt)
            assert r.status_code == 429 and "x-floodway-backend" not in r.headers, (prompt, r.text)
            validate_reply(r)
            assert metric(gw.url, "floodway_gateway_requests_total", backend=engine.url, outcome="retried") == n
    finally:
        engine.server.shutdown()
