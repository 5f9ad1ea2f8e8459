"""A size limit on the request head (request line and headers), for the engine's and the gateway's HTTP servers.

uvicorn's httptools protocol buffers a head without limit: one client sending a header that never ends grew a
gateway by 320 MB in 90 s (and its CPU, as the URL and header buffers are copied as they grow), on the way to
the pod's OOM kill. Bodies have their own limit (body_limit.py)."""

import json

from floodway.engine.server.responses import ErrorInfo, ErrorResponse
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # what an OpenAI client sends is a few hundred bytes; proxies' defaults are 8-64 KB


def head_too_large_response(max_bytes: int) -> bytes:
    error = ErrorInfo(message=f"Request head (request line and headers) too large: the limit is {max_bytes} bytes.",
                      type="invalid_request_error", code="header_too_large")
    body = json.dumps(ErrorResponse(error=error).model_dump()).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


class BoundedHead(HttpToolsProtocol):
    """HttpToolsProtocol answering 431 and closing once a request's head passes MAX_HEAD_BYTES. Counted per
    received chunk that leaves the parser still inside a head, so at most one chunk past the limit is ever held."""

    max_head_bytes = MAX_HEAD_BYTES

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not getattr(self, "_in_head", False) or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._in_head = False
            self.logger.warning("request head over %d bytes: 431", self.max_head_bytes)
            self.transport.write(head_too_large_response(self.max_head_bytes))
            self.transport.close()
