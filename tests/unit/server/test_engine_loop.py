"""The engine loop's threading contract, driven by a small scripted engine (the real one is exercised by the
integration tests): delivery, abort, rejection of a bad add, survival of a failing step, idle blocking."""

import queue
import threading
import time

import pytest
from floodway.engine.outputs import EngineStats, RequestMetrics, RequestOutput
from floodway.engine.server.engine_loop import EngineLoop


class ScriptedEngine:
    """Each request emits one token per step until it has `max_tokens`; `fail_next_step` raises once."""

    def __init__(self):
        self.requests: dict[str, dict] = {}
        self.pending: list[RequestOutput] = []
        self.steps = 0
        self.fail_next_step = False
        self.step_gate = threading.Semaphore(0)  # each step waits for a permit: the test paces the loop

    def add_request(self, rid, prompt, params, arrival_time=None, lora=None, priority=0):
        if not prompt:
            raise ValueError("prompt is empty")
        self.requests[rid] = {"prompt": prompt, "left": params, "out": [], "t": arrival_time}

    def abort_request(self, rid):
        r = self.requests.pop(rid, None)
        if r is not None:
            self.pending.append(self._output(rid, r, [], "abort"))

    def has_unfinished_requests(self):
        return bool(self.requests or self.pending)

    def step(self):
        assert self.step_gate.acquire(timeout=10), "test did not allow a step"
        self.steps += 1
        if self.fail_next_step:
            self.fail_next_step = False
            raise RuntimeError("boom")
        outs, self.pending = self.pending, []
        for rid, r in list(self.requests.items()):
            r["out"].append(7)
            r["left"] -= 1
            done = r["left"] == 0
            if done:
                del self.requests[rid]
            outs.append(self._output(rid, r, [7], "length" if done else None))
        return outs

    def stats(self):
        return EngineStats(len(self.requests), 0, 10, 10, 0.0, 0, 0, 0, 0, 0)

    def _output(self, rid, r, new, reason):
        return RequestOutput(rid, r["prompt"], new, list(r["out"]), "x" * len(new), "", reason is not None, reason,
                             None, None, 0, RequestMetrics(r["t"] or 0.0))


@pytest.fixture
def engine():
    e = ScriptedEngine()
    loop = EngineLoop(e)
    loop.start()
    yield e, loop
    e.step_gate.release(100)
    loop.stop()
    assert not loop.alive()


def _collector():
    q: queue.Queue = queue.Queue()
    return q, q.put


def _take(q, n):
    return [q.get(timeout=10) for _ in range(n)]


def test_outputs_are_delivered_in_order_until_finished(engine):
    e, loop = engine
    q, deliver = _collector()
    loop.add("a", [1, 2], 3, deliver)
    e.step_gate.release(3)
    outs = _take(q, 3)
    assert [o.finished for o in outs] == [False, False, True]
    assert outs[-1].finish_reason == "length" and outs[-1].output_token_ids == [7, 7, 7]


def test_a_rejected_add_reports_to_that_request_only(engine):
    e, loop = engine
    bad_q, bad = _collector()
    good_q, good = _collector()
    loop.add("bad", [], 2, bad)
    loop.add("good", [1], 1, good)
    err = bad_q.get(timeout=10)
    assert isinstance(err, ValueError) and "empty" in str(err)
    e.step_gate.release(1)
    assert good_q.get(timeout=10).finish_reason == "length"


def test_abort_delivers_a_final_abort_output(engine):
    e, loop = engine
    q, deliver = _collector()
    loop.add("a", [1], 100, deliver)
    e.step_gate.release(1)
    assert not _take(q, 1)[0].finished
    loop.abort("a")
    e.step_gate.release(3)  # a step may already be under way when the abort arrives: it lands before the next
    outs = _take(q, 1)
    while not outs[-1].finished:
        outs += _take(q, 1)
    assert outs[-1].finish_reason == "abort" and len(outs) <= 2
    deadline = time.monotonic() + 10
    while loop.stats.num_running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.stats.num_running == 0


def test_a_failing_step_fails_in_flight_requests_and_the_loop_keeps_serving(engine):
    e, loop = engine
    q, deliver = _collector()
    loop.add("a", [1], 100, deliver)
    e.fail_next_step = True
    e.step_gate.release(2)  # the failing step, then the step that drains the abort output
    err = q.get(timeout=10)
    assert isinstance(err, RuntimeError) and "engine step failed" in str(err)
    q2, deliver2 = _collector()
    loop.add("b", [1], 1, deliver2)
    e.step_gate.release(1)
    assert q2.get(timeout=10).finish_reason == "length"
    assert loop.alive()


def test_idle_loop_blocks_instead_of_stepping(engine):
    e, loop = engine
    e.step_gate.release(5)  # permits are there: an idle loop that stepped anyway would use them
    time.sleep(0.2)  # observation window for a loop that should do nothing (not synchronisation)
    assert e.steps == 0
    q, deliver = _collector()
    loop.add("a", [1], 1, deliver)
    assert q.get(timeout=10).finished and e.steps == 1


def test_step_delay_is_slept_in_the_loop_thread_after_each_step():
    """--step-delay-ms: every step takes at least the delay more (a lower bound, safe on a loaded machine), and
    the delay is slept by the loop's own thread, after the step's outputs are delivered."""
    e = ScriptedEngine()
    e.step_gate.release(100)
    loop = EngineLoop(e, step_delay_s=0.25)
    loop.start()
    try:
        q, deliver = _collector()
        t0 = time.monotonic()
        loop.add("a", [1], 3, deliver)
        outs = _take(q, 3)
        elapsed = time.monotonic() - t0
        assert outs[-1].finished and e.steps == 3
        assert elapsed >= 2 * 0.25  # two delays separate the three steps' outputs
    finally:
        loop.stop()
    assert not loop.alive()
