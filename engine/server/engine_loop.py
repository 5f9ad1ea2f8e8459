"""One thread owns the LLMEngine: it drains a command queue (add/abort) before each step, blocks when idle,
and hands each RequestOutput to the request's `deliver` callback (which the async front end makes
thread-safe with loop.call_soon_threadsafe).

`step_delay_s` (the --step-delay-ms testing knob) is slept here, after each step, never on the event loop.

The loop survives any error: a failing add is reported to that request only; a failing step fails every
in-flight request, aborts them in the engine so their KV blocks return to the pool, and carries on.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("floodway.engine.server")

Deliver = Callable[[object], None]  # a RequestOutput, or an Exception that ends the request


@dataclass
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: object
    arrival_time: float
    deliver: Deliver
    lora: str | None = None
    priority: int = 0


@dataclass
class _Abort:
    request_id: str


_STOP = object()


class EngineLoop:
    def __init__(self, engine, metrics=None, step_delay_s: float = 0.0):
        self._engine = engine
        self._step_delay_s = step_delay_s
        self._metrics = metrics
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._deliver: dict[str, Deliver] = {}  # loop thread only
        self.stats = engine.stats()  # latest snapshot; replaced whole, so readers on other threads see one state
        self.steps = 0
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    # ---- any thread ----
    def start(self) -> None:
        self._thread.start()

    def add(self, request_id: str, prompt_token_ids: list[int], params, deliver: Deliver,
            arrival_time: float | None = None, lora: str | None = None, priority: int = 0) -> None:
        self._commands.put(_Add(request_id, prompt_token_ids, params, arrival_time or time.time(), deliver, lora,
                                priority))

    def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    def stop(self, timeout_s: float = 10.0) -> None:
        self._commands.put(_STOP)
        self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread.is_alive()

    # ---- loop thread ----
    def _run(self) -> None:
        while True:
            busy = self._engine.has_unfinished_requests()
            # Idle: block until a command arrives (no busy loop). Busy: take what is queued, then step.
            commands = [] if busy else [self._commands.get()]
            while True:
                try:
                    commands.append(self._commands.get_nowait())
                except queue.Empty:
                    break
            for cmd in commands:
                if cmd is _STOP:
                    self._fail_all(RuntimeError("engine loop stopped"))
                    return
                self._handle(cmd)
            stepped = self._engine.has_unfinished_requests()
            if stepped:
                self._step()
            self.stats = self._engine.stats()
            if stepped and self._step_delay_s:
                time.sleep(self._step_delay_s)

    def _handle(self, cmd) -> None:
        if isinstance(cmd, _Add):
            try:
                self._engine.add_request(cmd.request_id, cmd.prompt_token_ids, cmd.params,
                                         arrival_time=cmd.arrival_time, lora=cmd.lora, priority=cmd.priority)
            except Exception as e:  # noqa: BLE001 - reported to this request only
                _safe(cmd.deliver, e)
                return
            self._deliver[cmd.request_id] = cmd.deliver
        elif cmd.request_id in self._deliver:
            # The engine frees its blocks now; its final output (finish_reason "abort") comes with the next step.
            self._engine.abort_request(cmd.request_id)

    def _step(self) -> None:
        try:
            outputs = self._engine.step()
        except Exception as e:  # noqa: BLE001 - keep serving: fail in-flight requests, free their blocks
            log.exception("engine step failed; aborting %d in-flight requests", len(self._deliver))
            self._fail_all(RuntimeError(f"engine step failed: {type(e).__name__}: {e}"))
            return
        self.steps += 1
        now = time.time()
        for out in outputs:
            deliver = self._deliver.get(out.request_id)
            if deliver is None:
                continue
            if out.finished:
                del self._deliver[out.request_id]
            if self._metrics:
                self._metrics.observe(out, now)
            _safe(deliver, out)

    def _fail_all(self, error: Exception) -> None:
        for rid, deliver in list(self._deliver.items()):
            try:
                self._engine.abort_request(rid)
            except Exception:  # noqa: BLE001
                log.exception("abort of %s failed", rid)
            _safe(deliver, error)
        self._deliver.clear()
        try:  # drain the final abort outputs so the engine holds no finished requests (bounded)
            for _ in range(3):
                if not self._engine.has_unfinished_requests():
                    break
                self._engine.step()
        except Exception:  # noqa: BLE001
            log.exception("engine step failed while aborting")


def _safe(deliver: Deliver, item) -> None:
    try:
        deliver(item)
    except Exception:  # noqa: BLE001 - e.g. the event loop closed during shutdown
        log.debug("delivery failed", exc_info=True)
