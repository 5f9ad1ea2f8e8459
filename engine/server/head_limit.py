"""Limits on the request head (request line and headers) for the engine's and the gateway's HTTP servers: its size,
and the time it may take to arrive.

uvicorn's httptools protocol buffers a head without limit: one client sending a header that never ends grew a
gateway by 320 MB in 90 s (and its CPU, as the URL and header buffers are copied as they grow), on the way to
the pod's OOM kill. Nor does it time out a connection before its first request's head is complete, so idle or
trickling connections (slowloris) were held forever, each a file descriptor. Bodies have their own limit
(body_limit.py)."""

import json

from floodway.engine.server.responses import ErrorInfo, ErrorResponse
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # what an OpenAI client sends is a few hundred bytes; proxies' defaults are 8-64 KB
HEAD_TIMEOUT_S = 30.0  # from connecting, or from a head's first byte, to its end (nginx's default: 60 s)


def head_too_large_response(max_bytes: int) -> bytes:
    error = ErrorInfo(message=f"Request head (request line and headers) too large: the limit is {max_bytes} bytes.",
                      type="invalid_request_error", code="header_too_large")
    body = json.dumps(ErrorResponse(error=error).model_dump()).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


class BoundedHead(HttpToolsProtocol):
    """HttpToolsProtocol answering 431 and closing once a request's head passes `max_head_bytes` (counted per
    received chunk that leaves the parser still inside a head, so at most one chunk past the limit is ever held),
    and closing a connection whose head is not complete `head_timeout_s` after it connected or the head began.
    Between requests on a kept-alive connection uvicorn's own keep-alive timeout applies."""

    max_head_bytes, head_timeout_s = MAX_HEAD_BYTES, HEAD_TIMEOUT_S
    _in_head, _head_bytes, _head_timer = False, 0, None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._in_head = False
            self.logger.warning("request head over %d bytes: 431", self.max_head_bytes)
            self.transport.write(head_too_large_response(self.max_head_bytes))
            self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()
