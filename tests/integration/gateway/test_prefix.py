"""Prefix-aware routing with real engines behind the real gateway: the second turn of each conversation lands on
the engine that served its first turn and hits that engine's prefix cache (its own vllm:prefix_cache_hits); a
drained engine's entries leave the gateway's index and its conversations go on elsewhere."""

import signal

import httpx
import pytest
from floodway.operator import procs

pytestmark = pytest.mark.slow

MODEL = "floodway/tiny-llama"

SYSTEM = "You are a helpful assistant for a shipping company. Answer briefly and name the policy you rely on. "


def first_turn(i: int) -> list[dict]:
    """Its own from the first block (a system prompt shared by all would rightly draw them to one engine)."""
    return [{"role": "system", "content": f"Conversation {i}. " + SYSTEM * 3},
            {"role": "user", "content": f"My parcel number {i * 7919} left the depot on day {i} "
                                        "and has not arrived; where could it be and whom should I call about it?"}]


def chat(gw: procs.Proc, messages: list[dict], validate_reply) -> tuple[str, str]:
    """(the backend that served, the answer's text), the answer checked against the OpenAI spec."""
    r = httpx.post(gw.url + "/v1/chat/completions", timeout=120,
                   json={"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.headers["x-floodway-backend"], validate_reply(r)["choices"][0]["message"]["content"]


def second_turn(messages: list[dict], answer: str) -> list[dict]:
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]


def backend_state(gw: procs.Proc, url: str) -> dict:
    return next(b for b in httpx.get(gw.url + "/debug/state").json()["backends"] if b["id"] == url)


def test_a_second_turn_lands_where_the_first_was_served_and_hits_its_cache(engines, gateway, metric, validate_reply):
    local_a, local_b, _ = engines
    gw = gateway({"backends": {"static": [local_a.url, local_b.url]}, "scrape_interval_s": 0.2,
                  "routing": {"seed": 1}})
    for i in range(6):  # with two engines a load-only pick would keep all six by chance once in 64 runs
        messages = first_turn(i)
        served, answer = chat(gw, messages, validate_reply)
        hits = metric(served, "vllm:prefix_cache_hits_total")
        again, _ = chat(gw, second_turn(messages, answer), validate_reply)
        assert again == served, f"conversation {i}: first turn on {served}, second on {again}"
        assert metric(served, "vllm:prefix_cache_hits_total") - hits >= 64  # several blocks of 16 tokens


def test_a_drained_engine_loses_its_entries_and_its_conversations_move(engines, gateway, tmp_path_factory,
                                                                      validate_reply):
    survivor = engines[0]
    port = procs.free_port()
    victim = procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", MODEL, "--host", "127.0.0.1", "--port",
                                                str(port), "--drain-timeout", "5"], port, timeout_s=300,
                         log_path=str(tmp_path_factory.mktemp("victim") / "engine.log"))
    try:
        gw = gateway({"backends": {"static": [victim.url, survivor.url]}, "scrape_interval_s": 0.2})
        on_victim = None
        for i in range(20):  # first turns spread by load: one lands on the victim soon
            messages = first_turn(100 + i)
            served, answer = chat(gw, messages, validate_reply)
            if served == victim.url:
                on_victim = second_turn(messages, answer)
                break
        assert on_victim is not None, "no first turn reached the victim in 20"
        assert backend_state(gw, victim.url)["prefix_blocks"] > 0
        victim.popen.send_signal(signal.SIGTERM)  # drain: /ready turns false at once, then it exits
        procs.wait_until(lambda: backend_state(gw, victim.url)["prefix_blocks"] == 0, 30, "the victim's entries gone")
        assert not backend_state(gw, victim.url)["ready"]
        served, _ = chat(gw, on_victim, validate_reply)
        assert served == survivor.url
        assert backend_state(gw, survivor.url)["prefix_blocks"] > 0
    finally:
        victim.kill()
