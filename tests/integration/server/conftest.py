"""Real `floodway engine` processes on the built-in model, started once and stopped (SIGTERM) at the end."""


import httpx
import pytest
from floodway.operator.procs import FLOODWAY_ARGV, free_port, start, wait_until


@pytest.fixture(scope="session")
def start_engine(tmp_path_factory):
    """Returns start(*extra_flags) -> Proc; every engine it started is stopped when the session ends."""
    procs = []

    def _start(*flags: str):
        port = free_port()
        log = tmp_path_factory.mktemp("engine") / "engine.log"
        argv = [*FLOODWAY_ARGV, "engine", "--host", "127.0.0.1", "--port", str(port), *flags]
        proc = start(argv, port, ready_path="/ready", timeout_s=240, log_path=str(log))
        procs.append(proc)
        return proc

    yield _start
    for proc in procs:
        proc.stop()
    # Every error the tests provoke must be handled: no traceback may reach an engine's log.
    crashed = [p.log_path for p in procs if "Traceback" in p.log_tail(10**7)]
    assert not crashed, f"tracebacks in {crashed}"


@pytest.fixture(scope="session")
def engine_server(start_engine):
    """The shared server: a short context (256) bounds the cost of any request the tests or the fuzzer send."""
    return start_engine("--max-model-len", "256", "--max-num-seqs", "8")


@pytest.fixture(scope="session")
def slow_server(start_engine):
    """engine_server with steps of at least 20 ms, so a long answer takes seconds however fast the machine: a client
    that gives up (or reads a few chunks) is gone long before the engine could have finished."""
    return start_engine("--max-model-len", "256", "--max-num-seqs", "8", "--step-delay-ms", "20")


@pytest.fixture(scope="session")
def wait_for():
    """wait_for(predicate, timeout_s, what): polls with a deadline; returns the last truthy value or fails."""

    def _wait(predicate, timeout_s: float, what: str):
        return wait_until(predicate, timeout_s, what)

    return _wait


@pytest.fixture(scope="session")
def engine_debug():
    """engine_debug(url) -> the server's /debug/engine JSON (engine stats, in-flight and waiting counts)."""
    return lambda url: httpx.get(url + "/debug/engine", timeout=10).json()
