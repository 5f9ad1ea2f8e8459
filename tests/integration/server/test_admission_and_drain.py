"""Admission control under a flood (429 + Retry-After, admitted requests all succeed), then SIGTERM drain.

One server for both, with a small admission bound; the drain test stops it, so it runs last in this module.
"""

import asyncio
import json
import signal
import threading

import httpx
import pytest

MAX_WAITING = 3
DRAIN_S = 3
# Scarcity by configuration, not by the CPU's speed: each step takes at least 50 ms, so an 8-token answer holds one of
# the two slots for 0.4 s (a flood of 24 at once meets full slots and a full queue) and a 200-token one takes 10 s,
# over three times the drain timeout, however fast the machine.
STEP_DELAY_MS = 50
LONG_TOKENS = 200


@pytest.fixture(scope="module")
def small_server(start_engine):
    return start_engine("--max-num-seqs", "2", "--max-waiting-requests", str(MAX_WAITING),
                        "--drain-timeout", str(DRAIN_S), "--step-delay-ms", str(STEP_DELAY_MS))


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing")


async def _flood(url: str, n: int) -> list[httpx.Response]:
    body = {"prompt": "flood", "max_tokens": 8, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        return await asyncio.gather(*[c.post("/v1/completions", json=body) for _ in range(n)])


def test_flood_past_admission_bound_gets_429_and_admitted_requests_succeed(small_server, validate_openai):
    rejected_before = _metric(small_server.url, "floodway_admission_rejected_total")
    responses = asyncio.run(_flood(small_server.url, 24))
    ok = [r for r in responses if r.status_code == 200]
    busy = [r for r in responses if r.status_code == 429]
    assert len(ok) + len(busy) == len(responses), [r.status_code for r in responses]
    assert len(busy) > 0 and len(ok) >= MAX_WAITING
    for r in ok:
        body = r.json()
        validate_openai(body, "CreateCompletionResponse")
        assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 8
    for r in busy:
        assert int(r.headers["retry-after"]) >= 1
        validate_openai(r.json(), "ErrorResponse")
        err = r.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "rate_limit_exceeded"
        assert "waiting" in err["message"]
    assert _metric(small_server.url, "floodway_admission_rejected_total") == rejected_before + len(busy)


def _stream(url: str, body: dict, out: dict, first_chunk: threading.Event) -> None:
    """Streams a completion; records its chunks and whether [DONE] arrived."""
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        out.update(status=r.status_code, chunks=[])
        for line in r.iter_lines():
            if line == "data: [DONE]":
                out["done"] = True
            elif line.startswith("data: "):
                first_chunk.set()
                out["chunks"].append(json.loads(line[6:]))


def _post(url: str, body: dict, out: dict) -> None:
    r = httpx.post(url + "/v1/completions", json=body, timeout=120)
    out.update(status=r.status_code, body=r.json())


def test_sigterm_drains_in_flight_then_exits_zero(small_server, wait_for, engine_debug, validate_stream,
                                                  validate_openai):
    url = small_server.url
    short, long, whole = {}, {}, {}
    events = [threading.Event(), threading.Event()]
    threads = [
        threading.Thread(target=_stream, args=(url, {"prompt": "short", "max_tokens": 8, "ignore_eos": True},
                                               short, events[0])),
        # Longer than the drain timeout by configuration (STEP_DELAY_MS): aborted when the grace period ends.
        threading.Thread(target=_stream, args=(url, {"prompt": "long", "max_tokens": LONG_TOKENS, "ignore_eos": True},
                                               long, events[1])),
    ]
    # Not streamed: the cut ends it with an error status instead of a 200 that strict clients cannot parse.
    threads.append(threading.Thread(target=_post, args=(url, {"prompt": "whole", "max_tokens": LONG_TOKENS,
                                                              "ignore_eos": True}, whole)))
    for t in threads[:2]:
        t.start()
    for e in events:
        assert e.wait(60), "streams did not start"
    threads[2].start()
    # The short stream may end first (8 tokens): its [DONE] read before the count, so no race either way.
    wait_for(lambda: 3 - bool(short.get("done")) == engine_debug(url)["inflight"], 60,
             "the non-streamed request to be in flight")
    small_server.popen.send_signal(signal.SIGTERM)
    wait_for(lambda: httpx.get(url + "/ready").status_code == 503, 2, "/ready to turn 503 at once")
    r = httpx.post(url + "/v1/completions", json={"prompt": "late", "max_tokens": 2})
    assert r.status_code == 503 and r.json()["error"]["code"] == "draining"
    assert httpx.get(url + "/health").status_code == 200  # alive while draining
    for t in threads:
        t.join(60)
    assert short["status"] == 200 and short["done"] and short["chunks"][-1]["choices"][0]["finish_reason"] == "length"
    validate_stream(short["chunks"], "CreateCompletionResponse")
    # The cut stream ends as the spec allows: an error event (never finish_reason "abort"), then [DONE].
    assert long["status"] == 200 and long["done"]
    validate_stream(long["chunks"], "CreateCompletionResponse", error_ends=True)
    assert long["chunks"][-1]["error"]["code"] == "request_interrupted"
    assert whole["status"] == 503 and whole["body"]["error"]["code"] == "request_interrupted"
    validate_openai(whole["body"], "ErrorResponse")
    assert small_server.popen.wait(30) == 0
