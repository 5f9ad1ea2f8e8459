"""Overflow with real processes: a burst engages overflow within a second of the local queue crossing its
threshold and loses nothing; the budget yields 429s; the opt-out header keeps requests local; a dead or
frozen overflow API opens the breaker and requests fall back to local queueing or 429 within deadlines."""

import asyncio
import json
import os
import signal
import threading
import time

import httpx
import pytest
from floodway.operator import procs
from floodway.operator.bench.loadgen import send_at_rate, send_each_at_rate
from floodway.operator.bench.prediction import run_bench as run_prediction
from floodway.operator.gateway.backends import parse_engine_load

pytestmark = pytest.mark.slow

MODEL = "floodway/tiny-llama"
STREAM = {"model": MODEL, "prompt": "tell me about the river in flood", "max_tokens": 12, "stream": True}
PLAIN = {**STREAM, "max_tokens": 8, "stream": False}
# 16 tokens each: at least 0.8 s on the local engines (LOCAL_ARGS' step delay), so at 20 req/s a queue forms
# whatever the CPU; no more, as every local request of a test must also finish on a loaded machine
LONG = {**PLAIN, "max_tokens": 16}
THRESHOLD = 2  # max_waiting_per_replica in the overflow_config fixture


def long_prompts(n: int, first: int = 0) -> list[dict]:
    """Streamed requests of ~1600 characters each (400 prompt tokens by the gateway's estimate, characters / 4),
    no two alike from their first block: the gateway expects a prompt it has sent before to hit the engine's
    prefix cache, which leaves nothing to prefill."""
    return [{**STREAM, "prompt": f"report {i}: " + "the river rose over the fields and into the town " * 32}
            for i in range(first, first + n)]


async def _first_crossing(local, stop: asyncio.Event, seen: list) -> None:
    """Records when the engines' own /metrics first show waiting per replica at the threshold."""
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set() and not seen:
            texts = await asyncio.gather(*(client.get(e.url + "/metrics") for e in local))
            waiting = sum(parse_engine_load(t.text)["waiting"] for t in texts)
            if waiting / len(local) >= THRESHOLD:
                seen.append(time.perf_counter())
            await asyncio.sleep(0.02)  # sampling period of the observation, not synchronisation


def burst_watching_queue(url: str, body: dict, local, n: int, rate: float, headers=None):
    async def run():
        stop, seen = asyncio.Event(), []
        watcher = asyncio.create_task(_first_crossing(local, stop, seen))
        results = await send_at_rate(url + "/v1/completions", body, n, rate, headers=headers)
        stop.set()
        await watcher
        return results, seen[0] if seen else None

    return asyncio.run(run())


def failures(results) -> list:
    return [(r.status, r.error, r.body[:300]) for r in results if r.status != 200]


def valid(url: str, results, validate_reply):
    """Asserts every answer (200s, streamed or not, and errors) is valid against the OpenAI spec; returns them."""
    for r in results:
        assert r.error is None, (r.index, r.error)
        validate_reply(url, r.status, r.body)
    return results


def test_burst_engages_overflow_within_a_second_and_loses_nothing(engines, gateway, overflow_config, metric,
                                                                 no_secret_anywhere, validate_reply):
    gw = gateway(overflow_config())
    assert metric(gw.url, "floodway_gateway_overflow_total") == 0  # idle: nothing overflowed
    results, crossed_at = burst_watching_queue(gw.url, STREAM, engines[:2], n=40, rate=20)

    assert not failures(valid(gw.url + "/v1/completions", results, validate_reply))
    for r in results:  # every stream is whole: no error event, terminated by [DONE]
        assert r.body.rstrip().endswith("data: [DONE]") and "backend_failed" not in r.body, r.body[-300:]
    overflowed = [r for r in results if r.backend == "overflow"]
    local = [r for r in results if r.backend in (engines[0].url, engines[1].url)]
    assert overflowed and local and len(overflowed) + len(local) == len(results)
    assert all('"model":"ext"' in r.body.replace(" ", "") for r in overflowed)  # the overflow API's model name
    assert crossed_at is not None, "the local queue never crossed its threshold: the burst was too small"
    # Engaged: the first request the gateway overflowed left the client this long after the engines' own
    # /metrics showed the crossing (negative: the gateway's in-flight counts saw the queue first). Its
    # response also waits for the external engine's first token, which on a shared CPU is not ours to bound.
    engaged = min(r.sent_at for r in overflowed) - crossed_at
    answered = min(r.first_byte_at for r in overflowed) - crossed_at
    print(f"overflow engaged {engaged * 1000:+.0f} ms from the crossing, first overflowed response "
          f"{answered * 1000:+.0f} ms; {len(overflowed)}/{len(results)} overflowed")
    assert engaged <= 1.0  # behaviour deadline from the issue, not a speed claim
    assert metric(gw.url, "floodway_gateway_overflow_total", reason="queue_depth") == len(overflowed)
    assert metric(gw.url, "floodway_gateway_requests_total", backend="overflow", outcome="ok") == len(overflowed)
    assert metric(gw.url, "floodway_gateway_requests_total", outcome="ok") == len(results)
    assert metric(gw.url, "floodway_gateway_added_latency_seconds_count") >= len(results) - 5
    no_secret_anywhere(gw, *(r.body for r in results))


def _prefill_rate(engine_url: str) -> float:
    return parse_engine_load(httpx.get(engine_url + "/metrics", timeout=10).text)["prefill_rate"]


SLOW_STEP_MS = 2000  # the predicted-TTFT test's engines: each step at least 2 s, carrying at most SLOW_STEP_TOKENS
SLOW_STEP_TOKENS = 128


def test_long_prompts_overflow_on_predicted_ttft(engine, engines, gateway, overflow_config, metric, validate_reply):
    """The backlog trigger on real engines, with the queue trigger out of reach, and the count it must overflow
    fixed by configuration. Two engines whose steps take at least 2 s and carry at most 128 prompt tokens export
    their prefill rate once they have timed a prefill (the 2 s dominate it, so it hardly moves with the CPU's
    load); the test reads it and sets the TTFT SLO so that the overflow threshold is three such prompts' prefill.
    24 prompts of 484 tokens (400 by the gateway's estimate) then arrive at once, and none gets its first token
    before its engine's fourth step, 6 s later. The gateway counts its own requests without a first byte as an
    engine's backlog, so an engine takes a prompt only with at most two ahead of it: each keeps at most 3, at least
    24 - 2 x 3 = 18 overflow, and each engine's first stays local. Nothing is lost."""
    local = [engine(f"slow-{n}", MODEL, "--max-num-seqs", "2", "--step-delay-ms", str(SLOW_STEP_MS),
                    "--max-num-batched-tokens", str(SLOW_STEP_TOKENS)) for n in "ab"]
    for i, e in enumerate(local):  # straight to each engine: a prefill timed there (its warm-up timed a decode)
        assert httpx.post(e.url + "/v1/completions", json={**long_prompts(1, 100 + i)[0], "stream": False,
                                                          "max_tokens": 1}, timeout=120).status_code == 200
    rate = min(_prefill_rate(e.url) for e in local)
    assert rate > 0
    alone_s = 400 / rate  # the gateway's estimate of these prompts: 400 tokens (characters / 4)
    slo_ms = 1000 * 3 * alone_s / 0.9  # predicted_ttft_factor 0.9: the threshold is 3 prompts' prefill
    gw = gateway(overflow_config(max_waiting_per_replica=1000) | {"slo": {"ttft_ms": slo_ms},
                                                                 "backends": {"static": [e.url for e in local]}})
    procs.wait_until(lambda: all(b["ready"] and b["prefill_tokens_per_s"] > 0 for b in httpx.get(
        gw.url + "/debug/state", timeout=10).json()["backends"]), 30, "both engines ready, their rates scraped")
    url = gw.url + "/v1/completions"
    results = asyncio.run(send_each_at_rate(url, [{**p, "max_tokens": 1} for p in long_prompts(24)], 1000))
    assert not failures(valid(url, results, validate_reply))
    spread = max(r.sent_at for r in results) - min(r.sent_at for r in results)
    assert spread < 3 * SLOW_STEP_MS / 1000, f"the burst took {spread:.2f} s to send, past the first token"
    overflowed = [r for r in results if r.backend == "overflow"]
    print(f"{len(overflowed)}/{len(results)} overflowed on the predicted TTFT (bound: 18 to 22; engine rate "
          f"{rate:.0f} tokens/s, SLO {slo_ms:.0f} ms)")
    assert len(results) - 2 * 3 <= len(overflowed) <= len(results) - 2
    assert {r.backend for r in results} - {"overflow"} == {e.url for e in local}  # each engine's first is local
    assert metric(gw.url, "floodway_gateway_overflow_total", reason="predicted_ttft") == len(overflowed)


def _one_engine_gateway(gateway, engine_url: str, external_url: str, ttft_ms: float = 1000) -> procs.Proc:
    """A gateway in front of one engine, scraping it every 200 ms, overflow to `external_url`."""
    return gateway({"served_models": [MODEL], "backends": {"static": [engine_url]}, "scrape_interval_s": 0.2,
                    "slo": {"ttft_ms": ttft_ms}, "overflow": {"enabled": True, "base_url": external_url + "/v1",
                                                               "model": "ext", "api_key_env": "OVERFLOW_KEY"}})


def _backend_state(gw: procs.Proc) -> dict:
    return httpx.get(gw.url + "/debug/state", timeout=10).json()["backends"][0]


def _teach_hold_time(gw: procs.Proc, engine_url: str, answers: list[dict], tokens: int = 20) -> None:
    """Answers of `tokens` steps of >= 100 ms each, straight to the engine: the gateway learns a slot hold of at least
    3/4 of that from its scrapes (the engine's finished counter and running gauge)."""
    for answer in answers:
        assert httpx.post(engine_url + "/v1/completions", json={**answer, "max_tokens": tokens, "ignore_eos": True},
                          timeout=120).status_code == 200
    procs.wait_until(lambda: _backend_state(gw)["running"] == 0 and (_backend_state(gw)["mean_slot_hold_s"] or 0)
                     >= 0.075 * tokens, 30, "the gateway saw them finish and learned the hold time")


def _hold(engine_url: str, body: dict) -> threading.Thread:
    """A request straight to the engine, in the background, holding what it takes there until it finishes."""
    holder = threading.Thread(target=httpx.post, args=(engine_url + "/v1/completions",),
                              kwargs={"json": {**body, "ignore_eos": True}, "timeout": 120}, daemon=True)
    holder.start()
    return holder


def test_a_short_request_behind_a_full_batch_overflows_on_its_slot_wait(engine, engines, gateway, metric,
                                                                       validate_reply):
    """An engine running one sequence at a time (--max-num-seqs 1), each step at least 100 ms, so a 20-token answer
    holds the slot at least 2 s whatever the CPU. Two such answers teach the gateway the hold time; then, with a
    third holding the slot, a short request has no prefill backlog ahead and no queue (the queue-depth rule's 4 is
    far), yet would wait seconds for the slot against a 1 s TTFT SLO: it overflows on the predicted TTFT. It stayed
    local before, and waited."""
    one = engine("one-slot", MODEL, "--max-num-seqs", "1", "--step-delay-ms", "100")
    gw = _one_engine_gateway(gateway, one.url, engines[2].url)
    answer = {"model": MODEL, "prompt": "x"}
    _teach_hold_time(gw, one.url, [answer, answer])
    holder = _hold(one.url, {**answer, "max_tokens": 60})
    procs.wait_until(lambda: _backend_state(gw)["admission_wait_s"] > 0.9, 30, "the gateway sees the slot taken")
    short = httpx.post(gw.url + "/v1/completions", json={**PLAIN, "max_tokens": 2}, timeout=60)
    assert short.status_code == 200 and short.headers["x-floodway-backend"] == "overflow", short.text
    validate_reply(short)
    assert metric(gw.url, "floodway_gateway_overflow_total", reason="predicted_ttft") == 1
    holder.join(120)


def test_a_long_prompt_behind_a_full_kv_cache_overflows_on_its_kv_wait(engine, engines, gateway, metric,
                                                                      validate_reply):
    """An engine with a KV cache of 512 tokens (--num-kv-blocks 32) and steps of at least 100 ms, slots to spare (64).
    Two 400-token prompts answered in 40 tokens teach the gateway the hold time (>= 3 s) and give the engine's
    exported prefill rate long prompts to time (short ones alone leave it to the noise of a loaded CPU); a 300-token
    prompt then decodes 60 tokens, holding 19-23 of the 32 blocks for >= 6 s. Another 480-token prompt (token ids: the
    gateway counts them exactly) needs more than the free blocks: no prefill backlog ahead, no queue, no slot wait,
    yet it waits for the holder's blocks (predicted >= 2.7 s) against a 2 s TTFT SLO and overflows on the predicted
    TTFT. Such a prompt to the idle engine stays local (so did this one before)."""
    tight = engine("kv-tight", MODEL, "--num-kv-blocks", "32", "--max-model-len", "512", "--step-delay-ms", "100")
    gw = _one_engine_gateway(gateway, tight.url, engines[2].url, ttft_ms=2000)
    url = gw.url + "/v1/completions"

    def prompt(first: int, n: int) -> dict:  # distinct ids per prompt: no prefix-cache hits between them
        return {"model": MODEL, "prompt": [10 + (first + i) % 1000 for i in range(n)], "max_tokens": 2}

    _teach_hold_time(gw, tight.url, [prompt(700, 400), prompt(800, 400)], tokens=40)
    holder = _hold(tight.url, {**prompt(500, 300), "max_tokens": 60})
    procs.wait_until(lambda: _backend_state(gw)["running"] == 1 and _backend_state(gw)["kv_usage"] >= 0.55, 30,
                     "the gateway sees the holder's blocks")
    behind = httpx.post(url, json=prompt(200, 480), timeout=60)
    assert behind.status_code == 200 and behind.headers["x-floodway-backend"] == "overflow", behind.text
    validate_reply(behind)
    assert metric(gw.url, "floodway_gateway_overflow_total", reason="predicted_ttft") == 1
    holder.join(120)
    procs.wait_until(lambda: _backend_state(gw)["running"] == 0 and _backend_state(gw)["kv_usage"] == 0, 30,
                     "the engine idle again")
    idle = httpx.post(url, json=prompt(0, 480), timeout=60)
    assert idle.status_code == 200 and idle.headers["x-floodway-backend"] == tight.url, idle.text
    validate_reply(idle)


def _engine_rate_scraped(gw_url: str, deadline_s: float = 30.0) -> float:
    """The prefill rate the gateway has scraped from its one engine (/debug/state), once it has one."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        rate = httpx.get(gw_url + "/debug/state", timeout=10).json()["backends"][0]["prefill_tokens_per_s"]
        if rate > 0:
            return rate
        time.sleep(0.1)  # polling period, with a deadline
    raise AssertionError("the gateway never scraped the engine's floodway_prefill_tokens_per_second")


def test_ttft_over_predicted_observes_every_streamed_answer_once_the_engine_exports_its_rate(engines, gateway,
                                                                                             metric, validate_reply):
    """Streamed answers feed the histogram of actual over predicted TTFT: the prediction's error, which
    `predicted_ttft_factor` must cover. The prediction divides the prompt tokens ahead and the request's own by
    the rate the engine exports from its step times (once it has prefilled something). No SLO here, so nothing
    overflows and every predicted answer counts; four at once on one engine that starts two per 50 ms step."""
    gw = gateway({"served_models": [MODEL], "scrape_interval_s": 0.2, "backends": {"static": [engines[0].url]}})
    url = gw.url + "/v1/completions"
    def sent(bodies, rate):
        return not failures(valid(url, asyncio.run(send_each_at_rate(url, bodies, rate)), validate_reply))

    assert sent(long_prompts(1), 1)  # the engine times a prefill
    assert _engine_rate_scraped(gw.url) > 0
    before = metric(gw.url, "floodway_gateway_ttft_over_predicted_count")
    assert sent(long_prompts(4, 1), 1000)
    assert metric(gw.url, "floodway_gateway_ttft_over_predicted_count") - before == 4
    assert metric(gw.url, "floodway_gateway_ttft_over_predicted_sum") > 0
    assert metric(gw.url, "floodway_gateway_replicas_needed_count") == 0  # no SLO, no overflow threshold
    # With a TTFT SLO only answers predicted at least half the overflow threshold count: none of these, at 60 s.
    far = gateway({"served_models": [MODEL], "scrape_interval_s": 0.2, "backends": {"static": [engines[0].url]},
                   "slo": {"ttft_ms": 60_000}})
    url = far.url + "/v1/completions"
    assert _engine_rate_scraped(far.url) > 0  # the engine timed prefills for the first gateway
    assert sent(long_prompts(1, 10), 1)
    assert sent(long_prompts(4, 11), 1000)
    assert metric(far.url, "floodway_gateway_ttft_over_predicted_count") == 0
    assert metric(far.url, "floodway_gateway_requests_total", outcome="ok") == 5
    # Each request, as it arrived, by the pool that would have kept it within the threshold (54 s): a fraction
    # of the one engine, which the autoscaler reads as "one fewer would have overflowed none".
    assert metric(far.url, "floodway_gateway_replicas_needed_count") == 5
    assert metric(far.url, "floodway_gateway_replicas_needed_bucket", le="1.0") == 5


def test_bench_prediction_runs_end_to_end():
    """`floodway bench prediction`, shrunk: it starts its processes, answers every prompt, reports, and stops."""
    out = run_prediction(engines=1, requests=6, rate=20.0, ttft_slo_ms=500, step_delay_ms=20,
                         max_num_batched_tokens=128, max_num_seqs=64, max_tokens=2, model=MODEL)
    assert "answered 6/6" in out and "actual / predicted TTFT over the" in out, out


def test_opt_out_header_keeps_requests_local(engines, gateway, overflow_config, metric, validate_reply):
    gw = gateway(overflow_config())
    results, crossed_at = burst_watching_queue(gw.url, LONG, engines[:2], n=24, rate=20,
                                               headers={"x-floodway-no-overflow": "1"})
    assert not failures(valid(gw.url + "/v1/completions", results, validate_reply))
    assert crossed_at is not None  # overflow would have engaged without the header
    assert {r.backend for r in results} <= {engines[0].url, engines[1].url}
    assert metric(gw.url, "floodway_gateway_overflow_total") == 0


def test_budget_exhaustion_yields_429_with_retry_after(engines, gateway, overflow_config, metric,
                                                       no_secret_anywhere, validate_reply):
    gw = gateway(overflow_config(max_requests_per_minute=3, hold_queue_size=4, hold_timeout_s=1.0))
    started = time.monotonic()
    results = asyncio.run(send_at_rate(gw.url + "/v1/completions", LONG, 40, 20))
    elapsed = time.monotonic() - started
    valid(gw.url + "/v1/completions", results, validate_reply)

    rejected = [r for r in results if r.status == 429]
    assert rejected, "the budget never ran out"
    assert all(r.status in (200, 429) and r.error is None for r in results), failures(results)
    for r in rejected:
        assert int(r.retry_after) >= 1
        assert json.loads(r.body)["error"]["code"] == "capacity_exceeded"
    overflowed = sum(r.backend == "overflow" for r in results)
    assert 1 <= overflowed <= 3 + int(elapsed / 20)  # 3 per minute: one more every 20 s
    assert metric(gw.url, "floodway_gateway_requests_total", backend="none", outcome="rejected") == len(rejected)
    assert 0 <= metric(gw.url, "floodway_gateway_overflow_budget_requests_left") <= 3
    assert metric(gw.url, "floodway_gateway_hold_seconds_count") >= 1
    no_secret_anywhere(gw, *(r.body for r in results))


def test_overflow_api_down_opens_breaker_and_falls_back_to_local(engines, gateway, overflow_config, metric,
                                                                   no_secret_anywhere, validate_reply):
    down = f"http://127.0.0.1:{procs.free_port()}/v1"  # nothing listens there
    gw = gateway(overflow_config(base_url=down, breaker={"failure_threshold": 2, "cooldown_s": 3600}))
    results = asyncio.run(send_at_rate(gw.url + "/v1/completions", LONG, 20, 20))
    assert not failures(valid(gw.url + "/v1/completions", results, validate_reply))  # all fell back to local queues
    assert {r.backend for r in results} <= {engines[0].url, engines[1].url}
    assert metric(gw.url, "floodway_gateway_overflow_breaker_open") == 1
    tried = metric(gw.url, "floodway_gateway_requests_total", backend="overflow", outcome="retried")
    assert 2 <= tried < len(results)  # the open breaker stopped sending to the API
    ready = httpx.get(gw.url + "/ready").json()
    assert ready["overflow"] is False and ready["ready_backends"] == 2
    no_secret_anywhere(gw, *(r.body for r in results))


def test_a_whole_answer_slower_than_the_first_byte_timeout_is_no_failure(engine, gateway, metric, validate_reply):
    """A request without stream gets its first byte after its last token: an overflow API that takes longer than
    the first-byte timeout to generate it is slow, not down. Its answer is served, not retried locally, and the
    breaker stays closed. Slowness by configuration: each of the API's steps takes at least 60 ms, so 32 tokens
    take at least ~2 s against a 1 s first-byte timeout; the slowest healthy pace is set to 1 token/s (the
    deadline: 1 s + 32 s), as a CPU-starved tiny engine runs under the default 10 (~5 tokens/s with the other
    core busy)."""
    slow_api = engine("slow-external", "ext", "--step-delay-ms", "60")
    dead_local = f"http://127.0.0.1:{procs.free_port()}"  # never ready: every request overflows
    gw = gateway({"backends": {"static": [dead_local]}, "overflow": {
        "enabled": True, "base_url": slow_api.url + "/v1", "model": "ext", "api_key_env": "OVERFLOW_KEY",
        "first_byte_timeout_s": 1.0, "slowest_tokens_per_s": 1.0,
        "breaker": {"failure_threshold": 1, "cooldown_s": 3600}}})
    whole = httpx.post(gw.url + "/v1/completions", json={**PLAIN, "max_tokens": 32}, timeout=60)
    assert whole.status_code == 200, whole.text
    assert whole.headers["x-floodway-backend"] == "overflow"
    assert validate_reply(whole)["usage"]["completion_tokens"] == 32
    assert whole.elapsed.total_seconds() > 1.0  # it did outlast the first-byte timeout
    assert metric(gw.url, "floodway_gateway_requests_total", backend="overflow", outcome="retried") == 0
    assert metric(gw.url, "floodway_gateway_overflow_breaker_open") == 0
    with httpx.stream("POST", gw.url + "/v1/completions", json={**STREAM, "max_tokens": 32}, timeout=60) as stream:
        assert stream.status_code == 200 and stream.headers["x-floodway-backend"] == "overflow"
        assert stream.read().decode().rstrip().endswith("data: [DONE]")  # its first token came within 1 s
        validate_reply(stream)


def test_frozen_overflow_api_never_hangs(engines, gateway, metric, no_secret_anywhere, validate_reply):
    """No local replica and an API that accepts connections but never answers: each request gets a 429
    within the first-byte timeout plus the hold deadline."""
    external = engines[2]
    dead_local = f"http://127.0.0.1:{procs.free_port()}"
    gw = gateway({"backends": {"static": [dead_local]}, "overflow": {
        "enabled": True, "base_url": external.url + "/v1", "model": "ext", "api_key_env": "OVERFLOW_KEY",
        "first_byte_timeout_s": 1.0, "hold_timeout_s": 2.0, "breaker": {"failure_threshold": 2, "cooldown_s": 3600}}})
    os.kill(external.pid, signal.SIGSTOP)  # the kernel still accepts connections; nothing answers
    try:
        results = asyncio.run(send_at_rate(gw.url + "/v1/completions", PLAIN, 6, 5))
    finally:
        os.kill(external.pid, signal.SIGCONT)
    assert all(r.status == 429 and int(r.retry_after) >= 1 for r in results), failures(results)
    valid(gw.url + "/v1/completions", results, validate_reply)
    assert max(r.latency for r in results) < 2.0 + 3.0  # hold deadline (it covers the 1 s timeout) + slack
    assert metric(gw.url, "floodway_gateway_overflow_breaker_open") == 1
    assert httpx.get(gw.url + "/ready").status_code == 503  # nothing can serve: out of the Service
    no_secret_anywhere(gw, *(r.body for r in results))
