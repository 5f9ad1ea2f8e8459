"""A lean HTTP/1.1 client for the local engines: keep-alive pools, one write per request, a C parser.

The gateway's hot path is one POST to an engine per request. aiohttp's general client spends several times the CPU
of this one on it, and on a busy machine that CPU is added latency. This client does only what that path needs: POST
with a known body, responses framed by content-length or chunked encoding (httptools decodes both), streaming reads
with a per-read timeout, and connection reuse. The overflow API (any server on the internet) still goes through
aiohttp.

A connection that sat idle may have been closed by the engine (uvicorn closes idle ones after 5 s): idle
connections older than `max_idle_s` are dropped, and a reused one that fails before any response byte is
retried once on a fresh connection.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from urllib.parse import urlsplit

import httptools

_PAUSE_AT = 1 << 20  # buffered body bytes that pause reading from the engine until the relay catches up


class UpstreamError(Exception):
    """The engine could not be reached, closed the connection, answered garbage or went silent."""


class UpstreamTimeout(UpstreamError):
    """The engine sent nothing for the read timeout: slow (a long whole answer, a deep queue), not known to be ill."""


class _Closed(UpstreamError):
    """The engine closed the connection (on a reused one before any answer: it had gone stale)."""


class Response:
    """An engine's answer: status and content type once the head arrived; the body is read with
    `readany()` (the next bytes, b"" at the end) or `read()` (all of it). `close()` when done: the
    connection goes back to the pool if the body was read whole, else it is dropped (which aborts the
    request on the engine)."""

    def __init__(self, conn: _Connection, read_timeout_s: float):
        self._conn, self._read_timeout_s = conn, read_timeout_s
        self.status = 0
        self.content_type = "application/json"
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._head = self._eof = self._closed = False
        self._keep_alive = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future | None = None

    # -- fed by the connection -------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _PAUSE_AT:
            self._conn.transport.pause_reading()
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if not self._eof and self._error is None:
            self._error = error
        self._wake()

    # -- read by the proxy -----------------------------------------------------------------------------
    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(self._read_timeout_s, self._expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _expire(self, waiter: asyncio.Future) -> None:
        if not waiter.done():
            self._fail(UpstreamTimeout(f"no data from the engine for {self._read_timeout_s:g} s"))
            self._conn.transport.close()

    async def _wait_head(self) -> None:
        while not self._head:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def readany(self) -> bytes:
        while not self._chunks:
            if self._eof:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered > _PAUSE_AT:
            self._conn.transport.resume_reading()
        self._buffered = 0
        return data

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._conn.finish(self._eof and self._keep_alive and self._error is None)


class _Connection(asyncio.Protocol):
    def __init__(self, pool: _Pool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.got_bytes = False  # of the current response
        self.lost = False
        self.idle_since = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.lost = True
        if self.response is not None:
            self.response._fail(_Closed("the engine closed the connection"))

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # nothing was asked: the stream is out of step, drop it
            self.transport.close()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self.response._fail(UpstreamError(f"malformed response from the engine: {e}"))
            self.transport.close()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.response.content_type = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.response.status = self.parser.get_status_code()
        self.response._head = True
        self.response._wake()

    def on_body(self, body: bytes) -> None:
        self.response._feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        response._eof, response._keep_alive = True, self.parser.should_keep_alive()
        response._wake()

    def finish(self, reusable: bool) -> None:
        """The current response is over: back to the pool, or closed."""
        self.response = None
        if reusable and not self.lost:
            self.got_bytes = False
            self.pool.release(self)
        else:
            self.transport.close()
            self.pool.forget()


class _Pool:
    """Keep-alive connections to one engine, at most `limit` open; further requests wait for one."""

    def __init__(self, base_url: str, limit: int, max_idle_s: float, connect_timeout_s: float):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"engine URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.prefix = parts.path.rstrip("/").encode()
        self.host_line = b"host: " + parts.netloc.encode() + b"\r\n"
        self.limit, self.max_idle_s, self.connect_timeout_s = limit, max_idle_s, connect_timeout_s
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()

    async def acquire(self) -> tuple[_Connection, bool]:
        """(connection, reused)."""
        loop = asyncio.get_running_loop()
        while True:
            now = time.monotonic()
            while self.idle:
                conn = self.idle.pop()
                if not conn.lost and now - conn.idle_since < self.max_idle_s:
                    return conn, True
                conn.transport.close()
                self.open -= 1
            if self.open < self.limit:
                break
            waiter = loop.create_future()
            self.waiters.append(waiter)
            try:
                return await waiter, True
            except _Reconnect:
                continue  # a slot freed up: open a connection
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self.release(waiter.result())  # handed over just as the caller went away
                raise
        self.open += 1
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(self), self.host, self.port, ssl=self.ssl), self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError) as e:
            self.forget()
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {e or type(e).__name__}") from None
        except BaseException:
            self.forget()
            raise
        return conn, False

    def release(self, conn: _Connection) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def forget(self) -> None:
        """A connection closed: its slot goes to a waiting request (which opens a new one) or back."""
        self.open -= 1
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(_Reconnect())
                return


class _Reconnect(Exception):
    """Tells a request waiting for a pooled connection that it may open one itself."""


class UpstreamClient:
    """POSTs to engines by base URL, one pool per engine."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float, limit_per_engine: int = 2048,
                 max_idle_s: float = 4.0):
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.limit, self.max_idle_s = limit_per_engine, max_idle_s
        self._pools: dict[str, _Pool] = {}

    def _pool(self, base_url: str) -> _Pool:
        pool = self._pools.get(base_url)
        if pool is None:
            pool = self._pools[base_url] = _Pool(base_url, self.limit, self.max_idle_s, self.connect_timeout_s)
        return pool

    async def post(self, base_url: str, path: str, body: bytes, content_type: bytes = b"application/json"
                   ) -> Response:
        """Sends the request and returns once the response head arrived (status known)."""
        pool = self._pool(base_url)
        head = (b"POST " + pool.prefix + path.encode() + b" HTTP/1.1\r\n" + pool.host_line + b"content-type: "
                + content_type + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n")
        for _ in range(2):
            conn, reused = await pool.acquire()
            response = conn.response = Response(conn, self.read_timeout_s)
            try:
                conn.transport.write(head + body)
                await response._wait_head()
                return response
            except _Closed:
                response.close()
                if not reused or conn.got_bytes:
                    raise
                # a stale keep-alive connection: one retry on a fresh one
            except BaseException:
                response.close()
                raise
        raise UpstreamError(f"no usable connection to {base_url}")

    def close(self) -> None:
        for pool in self._pools.values():
            for conn in pool.idle:
                conn.transport.close()
            pool.idle.clear()


class RemoteResponse:
    """The overflow API's answer (an aiohttp response) behind the same reading interface as Response."""

    def __init__(self, response):
        self._response = response
        self.status = response.status
        self.content_type = response.headers.get("content-type", "application/json")

    async def readany(self) -> bytes:
        return await self._response.content.readany()

    async def read(self) -> bytes:
        return await self._response.read()

    def close(self) -> None:
        self._response.close()  # a no-op once the body was read whole; else it aborts the request
