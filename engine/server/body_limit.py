"""ASGI middleware: refuse request bodies over a size limit with 413, before any handler reads them."""

import json

from floodway.engine.server.protocol import ErrorInfo, ErrorResponse


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._too_large(send)
        # Read the whole (bounded) body up front, so chunked uploads are limited too, then replay it.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._too_large(send)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the client's disconnect

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        error = ErrorInfo(message=f"Request body too large: the limit is {self.max_bytes} bytes.",
                          type="invalid_request_error", code="request_too_large")
        payload = json.dumps(ErrorResponse(error=error).model_dump()).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})
