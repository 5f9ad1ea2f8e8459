"""Run the app under uvicorn with graceful drain: on SIGTERM (or SIGINT) readiness turns false at once,
new generation requests get 503, in-flight requests finish for up to the drain timeout (the rest are
aborted and end with an error: 503, or an error event in a stream), then the server stops and the process exits 0.
A second signal stops at once."""

import asyncio
import logging
import signal

import uvicorn
from floodway.engine.server.client_limits import ClientLimits

log = logging.getLogger("floodway.engine.server")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state):
        super().__init__(config)
        self.state = state
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None

    async def serve(self, sockets=None) -> None:
        self._event_loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        # Not recorded in uvicorn's captured signals: re-raising SIGTERM after shutdown would turn a clean
        # drain into a kill by signal instead of exit code 0.
        if self._drain_task is not None or self._event_loop is None or sig not in (signal.SIGTERM, signal.SIGINT):
            self.should_exit = True
            self.force_exit = self._drain_task is not None
            return
        self._event_loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        state, timeout = self.state, self.state.options.drain_timeout_s
        state.draining = True
        frontend = state.frontend
        n = frontend.inflight if frontend else 0
        log.info("draining: %d requests in flight, up to %.1fs", n, timeout)
        if frontend is not None and not await frontend.wait_idle(timeout):
            log.warning("drain timeout: aborting %d requests", frontend.inflight)
            frontend.abort_all()
            await frontend.wait_idle(5.0)
        self.should_exit = True


def serve(app, host: str, port: int, log_level: str = "info") -> None:
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                            access_log=False, http=ClientLimits)
    DrainingServer(config, app.state.server).run()
