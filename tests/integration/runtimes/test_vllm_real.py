"""`runtime: vllm` for real: vLLM's CPU build (e2e/vllm/build.sh makes its virtualenv, cached by version) serving
SmolLM2-135M-Instruct in float32 with the flags the operator renders for the spec, one server for the module,
behind the real gateway. A floodway engine on the same folder of weights is the overflow API and the other side of
the greedy parity check. vLLM runs one sequence at a time here (max_num_seqs 1): a second request queues in it, so
its queue is made by configuration, not by racing the CPU."""

import contextlib
import importlib.util
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from floodway.engine.bench import vllm
from floodway.engine.models.builtin import resolve_model
from floodway.engine.models.smollm2 import NAME
from floodway.operator import procs
from floodway.operator.autoscaler.signals import parse_engine, signals_between
from floodway.operator.controller.scrape import scrape
from floodway.operator.gateway.backends import parse_engine_load
from floodway.operator.render.engine import ready_path
from floodway.operator.runtimes import RUNTIMES
from floodway.operator.spec import InferenceServiceSpec
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

SERVED = "smollm2"
PARITY = Path(__file__).resolve().parents[1] / "engine_parity" / "test_smollm2.py"
STANDIN = Path(__file__).with_name("vllm_standin.py")
PARITY_TOKENS = 64  # new tokens per parity prompt (vLLM decodes them one sequence at a time here)
TOP = 2  # logprobs asked per token: the runner-up gives the margin at a divergence
TIE_NATS = 1e-3  # logit margin under which fp32 rounding (different kernels, different sums) may flip the pick
LONG = 1800  # max_tokens of a request held open until a test has seen what it waits for, then closed
ADMITTED = 2  # vLLM's --max-num-queued-reqs: requests it holds (running and queued) before answering 503
# vLLM writes these optional fields as null where OpenAI leaves them out (the spec does not allow null there):
# the one way its bodies part from the spec here, checked by name so that any other deviation still fails.
NULLED = {"annotations", "audio", "function_call", "completion_tokens_details", "prompt_tokens_details"}
STORY = "Tell a long story about " + "a river that floods a valley town every spring, " * 6  # several prefix blocks


@pytest.fixture(scope="module")
def vllm_python() -> str:
    exe = vllm.python(build=False)
    if exe is None:
        pytest.skip("vLLM's CPU virtualenv is not built: run `bash e2e/vllm/build.sh` (minutes, once; cached)")
    return exe


@pytest.fixture(scope="module")
def model() -> str:
    return resolve_model(NAME)


@pytest.fixture(scope="module")
def spec(model) -> InferenceServiceSpec:
    return vllm.spec(model, SERVED, "float32", max_num_seqs=1, max_model_len=2048, max_num_batched_tokens=512)


@pytest.fixture(scope="module")
def server(vllm_python, spec, tmp_path_factory):
    """One vLLM server for the module, ready when its /health answers (the path the rendered probes use). It
    admits two requests at most (one running, one queued) and answers 503 to a third."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    argv = ["nice", "-n", "10", *vllm.server_argv(vllm_python, spec, port), "--max-num-queued-reqs", str(ADMITTED)]
    proc = procs.start(argv, port, ready_path(spec), timeout_s=900, env=vllm.server_env(threads=1),
                       log_path=str(log))
    yield proc
    proc.stop(grace_s=60)


@pytest.fixture(scope="module")
def ours(model, tmp_path_factory):
    """Our engine on the same weights: the overflow API, and the other side of the parity check."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("ours") / "engine.log"
    argv = procs.FLOODWAY_ARGV + ["engine", "--model", model, "--served-model-name", SERVED, "--dtype", "float32",
                                  "--max-model-len", "2048", "--host", "127.0.0.1", "--port", str(port)]
    proc = procs.start(argv, port, "/ready", timeout_s=300, env={"OMP_NUM_THREADS": "1"}, log_path=str(log))
    yield proc
    proc.stop(grace_s=10)


def start_gateway(folder: Path, server: procs.Proc, ours: procs.Proc, max_waiting: float) -> procs.Proc:
    """The gateway for `runtime: vllm`: vLLM its one backend, overflow to our engine at `max_waiting` queued."""
    port = procs.free_port()
    path = folder / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": port, "served_models": [SERVED], "engine_runtime": "vllm",
        "backends": {"static": [server.url]}, "scrape_interval_s": 0.2, "debug_state": True,
        "overflow": {"enabled": True, "base_url": ours.url + "/v1", "max_waiting_per_replica": max_waiting}}))
    return procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(path)], port, "/ready", timeout_s=60,
                       log_path=str(path.with_suffix(".log")))


@pytest.fixture(scope="module")
def gateway(server, ours, tmp_path_factory):
    """Overflows once one request waits in vLLM's queue."""
    proc = start_gateway(tmp_path_factory.mktemp("gateway"), server, ours, 1)
    yield proc
    proc.stop(grace_s=5)


def metrics_text(url: str) -> str:
    r = httpx.get(url + "/metrics", timeout=10)
    assert r.status_code == 200
    return r.text


def families(text: str) -> dict[str, str]:
    """{family name: type} of Prometheus text (counters under their name without _total, as the parser gives)."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def backend(gw: procs.Proc) -> dict:
    return httpx.get(gw.url + "/debug/state", timeout=5).json()["backends"][0]


def sse(lines) -> list[dict]:
    """The JSON chunks of an SSE stream, checking it ends with [DONE]."""
    events = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def without_nulls(body):
    """The body less the NULLED fields where vLLM sent null."""
    if isinstance(body, dict):
        return {k: without_nulls(v) for k, v in body.items() if not (k in NULLED and v is None)}
    return [without_nulls(v) for v in body] if isinstance(body, list) else body


def test_every_metric_name_the_runtime_table_maps_is_in_vllms_metrics(server):
    """The names the gateway and the autoscaler read for `runtime: vllm` (operator/runtimes.py) against vLLM's
    own /metrics: for each signal the first name in the table is the one this vLLM exports (later ones are
    older vLLMs' names)."""
    names = sample_names(metrics_text(server.url))
    table = RUNTIMES["vllm"].metrics
    for name in ("running", "waiting", "kv_usage", "finished"):
        assert getattr(table, name)[0] in names, (name, sorted(n for n in names if n.startswith("vllm:")))
    for name in ("ttft", "tpot", "itl"):
        assert getattr(table, name)[0] + "_bucket" in names, (name, sorted(names))


def test_our_engine_exports_vllm_names_as_vllm_does(server, ours):
    """Our engine's vllm: metrics claim vLLM's names (dashboards and KEDA triggers written for vLLM read them):
    each exists in vLLM's own /metrics with the same type."""
    theirs, mine = families(metrics_text(server.url)), families(metrics_text(ours.url))
    claimed = {n: t for n, t in mine.items() if n.startswith("vllm:")}
    assert claimed
    assert {n: t for n, t in claimed.items() if theirs.get(n) != t} == {}, sorted(theirs)


def test_the_standins_metrics_are_vllms(server):
    """vllm_standin.py (test_vllm.py's vLLM, for the tier that does not start vLLM) exports vLLM's own names."""
    from starlette.testclient import TestClient

    spec = importlib.util.spec_from_file_location("floodway_tests_vllm_standin", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    standin = families(TestClient(module.create_app(SERVED)).get("/metrics").text)
    theirs = families(metrics_text(server.url))
    assert standin and {n: t for n, t in standin.items() if theirs.get(n) != t} == {}


def test_chat_and_completions_through_the_gateway_are_openai_shaped(gateway, server, validate_openai,
                                                                      validate_stream):
    chat = {"model": SERVED, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "temperature": 0}
    r = httpx.post(gateway.url + "/v1/chat/completions", json=chat, timeout=120)
    assert r.status_code == 200 and r.headers["x-floodway-backend"] == server.url
    validate_openai(without_nulls(r.json()), "CreateChatCompletionResponse")
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=120,
                      json={**chat, "stream": True, "stream_options": {"include_usage": True}}) as s:
        assert s.status_code == 200 and s.headers["x-floodway-backend"] == server.url
        chunks = sse(s.iter_lines())
    validate_stream(without_nulls(chunks), "CreateChatCompletionStreamResponse")
    assert "Paris" in "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    plain = {"model": SERVED, "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    r = httpx.post(gateway.url + "/v1/completions", json=plain, timeout=120)
    assert r.status_code == 200
    validate_openai(without_nulls(r.json()), "CreateCompletionResponse")
    with httpx.stream("POST", gateway.url + "/v1/completions", json={**plain, "stream": True}, timeout=120) as s:
        validate_stream(without_nulls(sse(s.iter_lines())), "CreateCompletionResponse")
    r = httpx.get(gateway.url + "/v1/models", timeout=10)
    validate_openai(r.json(), "ListModelsResponse")
    assert [m["id"] for m in r.json()["data"]] == [SERVED]


def openai_error(body: dict) -> dict:
    """vLLM's error body as OpenAI shapes it: vLLM puts the HTTP status in error.code as an integer, where the
    spec has a string or null (its other fields are the spec's)."""
    assert isinstance(body["error"]["code"], int), body
    return {"error": {**body["error"], "code": str(body["error"]["code"])}}


def test_a_prompt_over_its_context_gets_vllms_400_through_the_gateway(gateway, server, validate_openai):
    r = httpx.post(gateway.url + "/v1/completions", timeout=60,
                   json={"model": SERVED, "prompt": "hello " * 3000, "max_tokens": 4})
    assert r.status_code == 400 and r.headers["x-floodway-backend"] == server.url  # vLLM's answer, passed through
    assert r.json()["error"]["code"] == 400
    validate_openai(openai_error(r.json()), "ErrorResponse")


def test_signals_and_prefix_index_size_from_vllms_metrics(gateway, server):
    """The autoscaler's parser on vLLM's real text: finished requests and SLO attainment from its histograms;
    the gateway's parser: its KV capacity (vllm:cache_config_info), which sizes the gateway's prefix index."""
    before = scrape({"vllm-0": server.url}, gateway.url, 0, time.time(), runtime="vllm")
    body = {"model": SERVED, "messages": [{"role": "user", "content": STORY}], "max_tokens": 8}
    for _ in range(2):
        assert httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
    procs.wait_until(lambda: time.time() > before.time, 1, "the clock to move")
    after = scrape({"vllm-0": server.url}, gateway.url, 0, time.time(), runtime="vllm")
    sig = signals_between(before, after, ttft_slo_s=60.0, tpot_slo_s=10.0)
    assert sig.ready == 1 and sig.held == 0
    assert sig.arrival_rate * sig.window_s == pytest.approx(2) and sig.finished_rate * sig.window_s == pytest.approx(2)
    assert sig.attainment == 1.0  # generous SLOs: every finished request within them, read from vLLM's buckets
    sample = parse_engine(metrics_text(server.url), RUNTIMES["vllm"].metrics)
    assert sample.ttft and sample.tpot and sample.tpot_per_request and sample.prompt_tokens_total > 0
    text = metrics_text(server.url)
    info = next(s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "vllm:cache_config_info")
    blocks, block_size = int(info.labels["num_gpu_blocks"]), int(info.labels["block_size"])
    assert blocks > 0 and parse_engine_load(text, RUNTIMES["vllm"].metrics)["kv_tokens"] == blocks * block_size
    assert backend(gateway)["prefix_blocks"] > 0  # the gateway indexes what it sent there, within that size


def vllm_load(server: procs.Proc) -> tuple[float, float]:
    sample = parse_engine(metrics_text(server.url), RUNTIMES["vllm"].metrics)
    return sample.running, sample.waiting


@contextlib.contextmanager
def running_and_queued(gw: procs.Proc, server: procs.Proc):
    """Two long streams through the gateway: one runs in vLLM (max_num_seqs 1), one waits in its queue, as vLLM's
    own gauges show; both are closed on exit (vLLM aborts a request whose client went away)."""
    stop, went = threading.Event(), []
    body = {"model": SERVED, "messages": [{"role": "user", "content": STORY}], "max_tokens": LONG,
            "ignore_eos": True, "stream": True}

    def stream() -> None:
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=300) as r:
            went.append(r.headers.get("x-floodway-backend"))
            for _ in r.iter_lines():
                if stop.is_set():
                    return

    def vllm_load_is(expected: tuple[int, int]) -> bool:
        assert all(b == server.url for b in went), f"a stream went to {went}, not vLLM: see the gateway's log"
        return vllm_load(server) == expected

    clients = [threading.Thread(target=stream) for _ in range(2)]
    try:
        clients[0].start()
        procs.wait_until(lambda: vllm_load_is((1, 0)), 120, "vLLM running the first stream")
        clients[1].start()
        procs.wait_until(lambda: vllm_load_is((1, 1)), 60, "vLLM queueing the second")
        yield
    finally:
        stop.set()
        for c in clients:
            c.join(120)
    procs.wait_until(lambda: vllm_load(server) == (0, 0), 60, "both streams aborted in vLLM")


SHORT = {"model": SERVED, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}


def test_its_queue_is_read_and_overflows_past_it(gateway, server):
    """The gateway and the autoscaler read vLLM's running and queued requests from its gauges; at one queued
    request (max_waiting_per_replica 1) the next request goes to the overflow API."""
    with running_and_queued(gateway, server):
        seen = procs.wait_until(lambda: (b := backend(gateway))["running"] == 1 and b["waiting"] == 1 and b, 30,
                                "the gateway to read 1 running and 1 waiting from vLLM's metrics")
        during = scrape({"vllm-0": server.url}, gateway.url, 0, time.time(), runtime="vllm")
        r = httpx.post(gateway.url + "/v1/chat/completions", json=SHORT, timeout=120)
    assert seen["ready"] and r.status_code == 200 and r.headers["x-floodway-backend"] == "overflow"
    assert during.engines["vllm-0"].running == 1 and during.engines["vllm-0"].waiting == 1


def test_its_full_queue_answer_overflows_and_keeps_it_in_rotation(server, ours, tmp_path, validate_openai):
    """vLLM answers 503 past --max-num-queued-reqs (so that load balancers retry elsewhere), where our engine
    answers 429. With a threshold the queue never reaches, the gateway sends the request on to the overflow API
    and keeps vLLM in rotation: a full queue is load, not ill health (what it holds stays in the prefix index)."""
    gw = start_gateway(tmp_path, server, ours, 8)
    try:
        with running_and_queued(gw, server):
            direct = httpx.post(server.url + "/v1/chat/completions", json=SHORT, timeout=60)
            held = backend(gw)["prefix_blocks"]
            r = httpx.post(gw.url + "/v1/chat/completions", json=SHORT, timeout=120)
            after = backend(gw)
    finally:
        gw.stop(grace_s=5)
    assert direct.status_code == RUNTIMES["vllm"].full_status
    validate_openai(openai_error(direct.json()), "ErrorResponse")
    assert r.status_code == 200 and r.headers["x-floodway-backend"] == "overflow"
    assert held > 0 and after["prefix_blocks"] >= held and after["ready"]


def parity_prompts(model: str) -> list[list[int]]:
    """The chat prompts of the engine's transformers parity test (loaded by path: no test folder is importable)."""
    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("floodway_tests_smollm2_parity", PARITY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.chats(AutoTokenizer.from_pretrained(model))


def greedy(url: str, prompt: list[int], validate_openai) -> dict:
    body = {"model": SERVED, "prompt": prompt, "max_tokens": PARITY_TOKENS, "temperature": 0, "logprobs": TOP}
    r = httpx.post(url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text[:500]
    validate_openai(without_nulls(r.json()), "CreateCompletionResponse")
    return r.json()["choices"][0]


def divergence(a: dict, b: dict) -> tuple[int, str, str, float, float] | None:
    """None when both chose the same tokens; else where they part, each side's token, and each side's margin
    there between its own pick and the other's (in its own logprobs)."""
    ta, tb = a["logprobs"]["tokens"], b["logprobs"]["tokens"]
    i = next((k for k, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
    if i is None:
        assert len(ta) == len(tb), "one stopped early with the same tokens"
        return None
    top_a, top_b = a["logprobs"]["top_logprobs"][i], b["logprobs"]["top_logprobs"][i]
    return (i, ta[i], tb[i], top_a[ta[i]] - top_a.get(tb[i], float("-inf")),
            top_b[tb[i]] - top_b.get(ta[i], float("-inf")))


def test_greedy_tokens_equal_ours_or_part_at_a_near_tie(server, ours, model, validate_openai, capsys):
    """Greedy fp32 on the engine parity prompts, with logprobs: the same tokens as our engine, or the first
    divergence is a near tie (both engines' logit margin there under TIE_NATS), which fp32 rounding decides."""
    prompts = parity_prompts(model)
    with ThreadPoolExecutor(2) as pool:  # both servers at once; each takes its prompts one at a time
        futures = [pool.submit(lambda url: [greedy(url, p, validate_openai) for p in prompts], proc.url)
                   for proc in (server, ours)]
        theirs, mine = (f.result(timeout=1200) for f in futures)
    parted = {i: d for i, (a, b) in enumerate(zip(theirs, mine, strict=True))
              if (d := divergence(a, b))}
    with capsys.disabled():
        print(f"\nvLLM vs ours, greedy fp32, {len(prompts)} prompts x {PARITY_TOKENS} tokens: "
              f"{len(prompts) - len(parted)} identical" + "".join(
                  f"; prompt {i} parts at token {k}: {x!r} (vLLM, margin {ma:.1e}) vs {y!r} (ours, margin {mb:.1e})"
                  for i, (k, x, y, ma, mb) in parted.items()))
    for i, (k, x, y, ma, mb) in parted.items():
        assert max(abs(ma), abs(mb)) < TIE_NATS, f"prompt {i} parts at token {k} ({x!r} vs {y!r}) without a near tie"


def test_sigterm_lets_a_started_stream_finish(server, gateway):
    """Last: stops the module's server. vLLM's drain as the pod sees it."""
    body = {"model": SERVED, "prompt": "Once upon a time", "max_tokens": 32, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    got: list[str] = []

    def stream() -> None:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
            got.extend(r.iter_lines())

    client = threading.Thread(target=stream)
    client.start()
    procs.wait_until(lambda: got, 60, "the first chunk")
    server.popen.send_signal(signal.SIGTERM)
    client.join(120)
    chunks = sse(got)
    # All 32 tokens, counted by usage: vLLM merges the deltas of a client that reads slower than it writes, so on a
    # loaded machine fewer than 32 chunks carry them.
    assert chunks[-1]["usage"]["completion_tokens"] == 32
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert server.popen.wait(60) == 0


def test_the_offline_bench_runs_vllms_engine_on_every_requested_token(vllm_python, model):
    from floodway.engine.bench.workloads import Workload

    wl = Workload("t", [[5, 6, 7, 8, 9], [10, 11, 12]], [6, 3], "two requests")
    r = vllm.run_offline(vllm_python, wl, model, "float32", 128, 4, 128, 64 * 2**20, threads=1)
    assert r.error is None and r.output_tokens == 9 and r.seconds > 0 and r.cpu_seconds > 0
