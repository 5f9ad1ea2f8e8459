"""Real processes on 127.0.0.1: two local floodway engines, a third standing in as the external
OpenAI-compatible API (served as model `ext`), and gateways started per test with their own config."""

import signal

import httpx
import pytest
import yaml
from floodway.operator import procs
from prometheus_client.parser import text_string_to_metric_families

MODEL = "floodway/tiny-llama"
API_KEY = "sk-floodway-test-0123456789abcdef"  # what the tests look for in logs, metrics and bodies
# Scarcity by configuration, not by racing the CPU: two sequences per step, each step at least 50 ms, so an
# engine finishes at most 2 / (0.05 s x tokens) requests per second however fast or idle the machine is (under
# 4 req/s for the overflow tests' 12-token streams), and a burst at 20 req/s queues locally at once. A deep
# admission queue: no local request is refused by the engine itself.
LOCAL_ARGS = ["--max-num-seqs", "2", "--step-delay-ms", "50", "--max-waiting-requests", "500"]


def start_engine(tmp_path_factory, name: str, served: str = MODEL, *extra: str) -> procs.Proc:
    port = procs.free_port()
    log = tmp_path_factory.mktemp("engines") / f"{name}.log"
    argv = procs.FLOODWAY_ARGV + ["engine", "--model", MODEL, "--host", "127.0.0.1", "--port", str(port),
                                  "--served-model-name", served, *extra]
    proc = procs.start(argv, port, timeout_s=300, log_path=str(log))
    # The first forward pass is slow (lazy initialisation): take it here, not inside a timed burst.
    httpx.post(proc.url + "/v1/completions", timeout=120,
               json={"model": served, "prompt": "warm up", "max_tokens": 2})
    return proc


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    """(local_a, local_b, external) engine processes, shared by the gateway tests."""
    started = []
    try:
        for name, served, extra in (("local-a", MODEL, LOCAL_ARGS), ("local-b", MODEL, LOCAL_ARGS),
                                    ("external", "ext", [])):
            started.append(start_engine(tmp_path_factory, name, served, *extra))
        yield tuple(started)
    finally:
        for proc in started:
            proc.popen.send_signal(signal.SIGCONT)  # a test may have frozen it
            proc.stop(grace_s=5)


@pytest.fixture
def engine(tmp_path_factory):
    """start(name, served, *args) -> Proc: one more engine for a single test, stopped after it."""
    started = []

    def start(name: str, served: str = MODEL, *extra: str) -> procs.Proc:
        started.append(start_engine(tmp_path_factory, name, served, *extra))
        return started[-1]

    yield start
    for proc in started:
        proc.stop(grace_s=5)


@pytest.fixture
def gateway(tmp_path):
    """start(config: dict, env=None, ready_path="/ready", debug_state=True) -> Proc; every gateway started is
    stopped after the test."""
    started = []

    def start(config: dict, env: dict | None = None, ready_path: str = "/ready", debug_state: bool = True
              ) -> procs.Proc:
        port = procs.free_port()
        path = tmp_path / f"gateway-{len(started)}.yaml"
        debug = {"debug_state": True} if debug_state else {}  # the tests read /debug/state (off by default)
        path.write_text(yaml.safe_dump({"host": "127.0.0.1", "port": port, **debug, **config}))
        proc = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(path)], port, ready_path, timeout_s=60,
                           env={"OVERFLOW_KEY": API_KEY, **(env or {})},
                           log_path=str(tmp_path / f"gateway-{len(started)}.log"))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(grace_s=5)


@pytest.fixture
def overflow_config(engines):
    """make(**overflow settings) -> gateway config: both local engines, overflow to the external one."""
    local_a, local_b, external = engines

    def make(**overflow) -> dict:
        return {"served_models": [MODEL], "scrape_interval_s": 0.2,
                "backends": {"static": [local_a.url, local_b.url]},
                "overflow": {"enabled": True, "base_url": external.url + "/v1", "model": "ext",
                             "api_key_env": "OVERFLOW_KEY", "max_waiting_per_replica": 2, "first_byte_timeout_s": 30,
                             **overflow}}

    return make


@pytest.fixture
def metric():
    """metric(url, name, **labels) -> the sum of the matching samples of url's /metrics (0 if none)."""

    def read(url: str, name: str, **labels) -> float:
        text = httpx.get(url + "/metrics", timeout=10).text
        return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    return read


@pytest.fixture
def no_secret_anywhere():
    """check(gateway_proc, *texts): the API key appears in none of the gateway's log, metrics, debug
    output or the given response bodies."""

    def check(proc: procs.Proc, *texts: str) -> None:
        outputs = {"log": proc.log_tail(10**7), "metrics": httpx.get(proc.url + "/metrics").text,
                   "debug": httpx.get(proc.url + "/debug/state").text}
        outputs.update({f"body {i}": t for i, t in enumerate(texts)})
        for where, text in outputs.items():
            assert API_KEY not in text, f"API key leaked in {where}"

    return check

