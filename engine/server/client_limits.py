"""What one client connection may hold of the engine's and the gateway's HTTP servers: a request head (request line
and headers) of at most 64 KB, complete within 30 s of connecting or of its first byte, and a body that never stalls
for 30 s. The body's size limit is body_limit.py's.

uvicorn's httptools protocol has none of these: it buffers a head without limit (one client sending a header that
never ends grows the process, and its CPU as the buffers are copied as they grow, until the pod's OOM kill), and
holds a connection that sends nothing, or trickles a head or a body, forever (slowloris):
each a file descriptor and, with a body, a request task."""

from floodway.engine.server.body_limit import error_json
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # what an OpenAI client sends is a few hundred bytes; proxies' defaults are 8-64 KB
HEAD_TIMEOUT_S = 30.0  # from connecting, or from a head's first byte, to its end (nginx's default: 60 s)
BODY_IDLE_TIMEOUT_S = 30.0  # the longest pause within a body (nginx's client_body_timeout: 60 s)


def error_response(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole HTTP response in the OpenAI error shape that closes the connection."""
    body = error_json(message, code)
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class ClientLimits(HttpToolsProtocol):
    """HttpToolsProtocol with those limits. A head is counted per received chunk that leaves the parser still inside
    it, so at most one chunk past the limit is ever held. Between requests on a kept-alive connection uvicorn's own
    keep-alive timeout applies."""

    max_head_bytes, head_timeout_s, body_idle_timeout_s = MAX_HEAD_BYTES, HEAD_TIMEOUT_S, BODY_IDLE_TIMEOUT_S
    _phase, _head_bytes, _timer = "idle", 0, None  # phase: head, body (until the message is complete), idle

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._enter("head", self.head_timeout_s)

    def connection_lost(self, exc) -> None:
        self._enter("idle", None)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._enter("head", self.head_timeout_s)

    def on_headers_complete(self) -> None:
        self._enter("body", self.body_idle_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._enter("idle", None)
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._phase == "body":  # a pause is measured from the last bytes
            self._enter("body", self.body_idle_timeout_s)
        elif self._phase == "head":
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self.logger.warning("request head over %d bytes: 431", self.max_head_bytes)
                self._refuse(error_response(431, "Request Header Fields Too Large", "Request head (request line "
                                            f"and headers) too large: the limit is {self.max_head_bytes} bytes.",
                                            "header_too_large"))

    def _enter(self, phase: str, timeout_s: float | None) -> None:
        self._phase = phase
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None if timeout_s is None else self.loop.call_later(timeout_s, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self._phase == "body" and self.cycle is not None and not self.cycle.response_started:
            self._refuse(error_response(408, "Request Timeout", f"The request body stalled: no bytes for "
                                        f"{self.body_idle_timeout_s:g} s.", "request_timeout"))
        else:  # no head yet: there is no request to answer
            self._refuse(b"")

    def _refuse(self, response: bytes) -> None:
        self._enter("idle", None)
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()
