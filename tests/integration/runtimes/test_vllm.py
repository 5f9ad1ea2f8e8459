"""`runtime: vllm` behind the real gateway (a real process) and read by the autoscaler's scrape, with
vllm_standin.py for vLLM: a real HTTP server with exactly vLLM's endpoints and metric names (/health and no
/ready, /v1/models, vllm:* metrics), which starts in a second. test_vllm_real.py runs vLLM itself (its CPU build)
and checks the stand-in's metric names against vLLM's own."""

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from floodway.engine.bench.serve_cli import target_model
from floodway.operator import procs
from floodway.operator.autoscaler.signals import signals_between
from floodway.operator.controller.scrape import scrape

STANDIN = Path(__file__).with_name("vllm_standin.py")
SERVED = "org/served-by-vllm"
CHAT = {"model": SERVED, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """The stand-in for a vLLM server, ready when its /health answers (as the rendered startup probe waits)."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("vllm") / "standin.log"
    proc = procs.start([sys.executable, "-P", str(STANDIN), "--port", str(port), "--served-model-name", SERVED],
                       port, "/health", timeout_s=60, log_path=str(log))
    yield proc
    proc.stop(grace_s=5)


def start_gateway(tmp_path: Path, engine_runtime: str, backend: str) -> procs.Proc:
    port = procs.free_port()
    config = {"host": "127.0.0.1", "port": port, "served_models": [SERVED], "engine_runtime": engine_runtime,
              "backends": {"static": [backend]}, "scrape_interval_s": 0.2, "overflow": {"hold_timeout_s": 5.0},
              "debug_state": True}
    path = tmp_path / f"gateway-{engine_runtime}.yaml"
    path.write_text(yaml.safe_dump(config))
    # /health: the gateway process is up; whether it sees a ready backend is what the tests look at.
    return procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(path)], port, "/health", timeout_s=60,
                       log_path=str(tmp_path / f"gateway-{engine_runtime}.log"))


def backend_ready(gw: procs.Proc) -> bool:
    return httpx.get(gw.url + "/debug/state", timeout=5).json()["backends"][0]["ready"]


def test_the_standin_serves_what_vllm_serves(vllm):
    assert httpx.get(vllm.url + "/ready").status_code == 404  # the premise: vLLM has no /ready
    assert [m["id"] for m in httpx.get(vllm.url + "/v1/models").json()["data"]] == [SERVED]


def test_bench_serve_target_sends_the_served_model_name(vllm):
    assert target_model(vllm.url) == SERVED  # not the built-in model's name, which vLLM would answer with 404


def test_gateway_routes_to_vllm_and_the_autoscaler_reads_it(vllm, tmp_path):
    gw = start_gateway(tmp_path, "vllm", vllm.url)
    try:
        procs.wait_until(lambda: httpx.get(gw.url + "/ready").status_code == 200, 10, "the vLLM backend ready")
        before = scrape({"vllm-0": vllm.url}, gw.url, 0, time.time(), runtime="vllm")
        r = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 200 and r.headers["x-floodway-backend"] == vllm.url
        assert r.json()["choices"][0]["message"]["content"] == "stand-in for vLLM"
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30) as s:
            assert s.status_code == 200 and s.headers["x-floodway-backend"] == vllm.url
            assert "".join(s.iter_text()).rstrip().endswith("data: [DONE]")
        procs.wait_until(lambda: time.time() > before.time, 1, "the clock to move")
        after = scrape({"vllm-0": vllm.url}, gw.url, 0, time.time(), runtime="vllm")
    finally:
        gw.stop(grace_s=5)
    sig = signals_between(before, after, ttft_slo_s=0.5, tpot_slo_s=0.05)
    assert sig.ready == 1 and sig.starting == 0 and sig.held == 0
    assert sig.arrival_rate * sig.window_s == pytest.approx(2)  # both requests reached the gateway...
    assert sig.finished_rate * sig.window_s == pytest.approx(2)  # ...and vLLM counted both as finished
    assert sig.attainment == 1.0  # from vLLM's TTFT and inter-token histograms


def test_probing_ready_as_for_our_engine_holds_every_request(vllm, tmp_path):
    """What the gateway did for every runtime before: probe /ready. vLLM answers 404, so the backend never
    turns ready, requests are held until they time out, and the autoscaler counts them as unserved demand."""
    gw = start_gateway(tmp_path, "floodway", vllm.url)
    replies = []
    client = threading.Thread(target=lambda: replies.append(
        httpx.post(gw.url + "/v1/chat/completions", json=CHAT, timeout=30)))
    try:
        client.start()
        procs.wait_until(lambda: scrape({}, gw.url, 0, time.time()).gateway.held == 1, 5, "the request held")
        assert not backend_ready(gw) and httpx.get(gw.url + "/ready").status_code == 503
        client.join(30)
    finally:
        gw.stop(grace_s=5)
    assert replies[0].status_code == 429  # held to its deadline: no backend was ever ready
