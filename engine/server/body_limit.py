"""Request bodies read whole up to a size limit, and the 413 beyond it: the engine's middleware and the
gateway (which reads bodies itself on its hot path) share them."""

import json

from floodway.engine.server.responses import ErrorInfo, ErrorResponse


class BodyTooLarge(Exception):
    pass


async def read_body(scope, receive, max_bytes: int) -> bytes | None:
    """The request's whole body, or None when the client went away first. Raises BodyTooLarge past
    `max_bytes`: on the declared Content-Length before reading, and while reading (chunked uploads)."""
    length = dict(scope.get("headers") or []).get(b"content-length")
    if length is not None and (not length.isdigit() or int(length) > max_bytes):
        raise BodyTooLarge
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > max_bytes:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return b"".join(chunks)


def error_json(message: str, code: str) -> bytes:
    """An OpenAI-shaped error body for a request refused before any handler read it."""
    error = ErrorInfo(message=message, type="invalid_request_error", code=code)
    return json.dumps(ErrorResponse(error=error).model_dump()).encode()


class TooLarge:
    """The 413 answer (an ASGI application); the connection closes, as the rest of the body is never read."""

    def __init__(self, max_bytes: int):
        self.body = error_json(f"Request body too large: the limit is {max_bytes} bytes.", "request_too_large")

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(self.body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": self.body})


class BodyLimit:
    """ASGI middleware: the body read whole (bounded) before any handler runs, then replayed to it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            body = await read_body(scope, receive, self.max_bytes)
        except BodyTooLarge:
            return await TooLarge(self.max_bytes)(scope, receive, send)
        if body is None:
            return  # the client went away before sending its body
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the client's disconnect

        await self.app(scope, replay, send)
