"""The async side of the engine: admission, per-request output streams, in-flight tracking.

Runs on the event loop only. A request counts as waiting from admission until its first output (or its
end); the admission rule sees that count, the prompt tokens behind it, and the recent drain rate.
"""

import asyncio
import time
from collections import deque

from floodway.engine.server.admission import Admission, AdmissionPolicy, QueueState, decide
from floodway.engine.server.engine_loop import EngineLoop

RATE_WINDOW_S = 10.0


def drain_rate(departures: deque, now: float, window_s: float = RATE_WINDOW_S) -> float:
    """Departures per second over the last window (drops older timestamps from the left)."""
    while departures and departures[0] < now - window_s:
        departures.popleft()
    return len(departures) / window_s


class Rejected(Exception):
    def __init__(self, admission: Admission):
        super().__init__(admission.reason)
        self.admission = admission


class RequestStream:
    """Async iterator over one request's RequestOutputs. Closing it, or cancelling a pending read (a client
    disconnect), before the final output aborts the request in the engine, which frees its KV blocks."""

    def __init__(self, frontend: "AsyncEngine", request_id: str):
        self._frontend, self.request_id = frontend, request_id
        self._queue: asyncio.Queue = asyncio.Queue()
        self._event_loop = asyncio.get_running_loop()
        self.finished = self.closed = False

    def deliver(self, item) -> None:  # engine loop thread
        self._event_loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.finished or self.closed:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except BaseException:
            self.close()
            raise
        self._frontend._left_waiting(self.request_id)
        if isinstance(item, Exception):
            self.finished = True  # the engine loop already forgot it
            self.close()
            raise item
        if item.finished:
            self.finished = True
            self.close()
        return item

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.finished:
            self._frontend.loop.abort(self.request_id)
        self._frontend._released(self.request_id)


class AsyncEngine:
    def __init__(self, engine_loop: EngineLoop, policy: AdmissionPolicy):
        self.loop = engine_loop
        self.policy = policy
        self._waiting: dict[str, int] = {}  # request id -> prompt tokens, until its first output
        self._departures: deque = deque()
        self._streams: dict[str, RequestStream] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def inflight(self) -> int:
        return len(self._streams)

    def queue_state(self) -> QueueState:
        return QueueState(len(self._waiting), sum(self._waiting.values()),
                          drain_rate(self._departures, time.monotonic()))

    def submit(self, request_id: str, prompt_token_ids: list[int], params, lora: str | None = None,
               priority: int = 0) -> RequestStream:
        """Admits (or raises Rejected) and queues the request, synchronously, so that concurrent
        requests see each other in the admission count."""
        decision = decide(self.queue_state(), len(prompt_token_ids), self.policy)
        if not decision.admit:
            raise Rejected(decision)
        stream = RequestStream(self, request_id)
        self._streams[request_id] = stream
        self._waiting[request_id] = len(prompt_token_ids)
        self._idle.clear()
        self.loop.add(request_id, prompt_token_ids, params, stream.deliver, arrival_time=time.time(), lora=lora,
                      priority=priority)
        return stream

    def abort_all(self) -> None:
        for stream in list(self._streams.values()):
            self.loop.abort(stream.request_id)

    async def wait_idle(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    def _left_waiting(self, request_id: str) -> None:
        if self._waiting.pop(request_id, None) is not None:
            self._departures.append(time.monotonic())

    def _released(self, request_id: str) -> None:
        self._left_waiting(request_id)
        self._streams.pop(request_id, None)
        if not self._streams:
            self._idle.set()
