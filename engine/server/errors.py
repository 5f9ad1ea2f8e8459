"""OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} for every failure the API can return.

Handlers turn FastAPI's validation errors (including invalid JSON) into 400s that name the field, and any
unexpected exception into a 500 without a stack trace in the body.
"""

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from floodway.engine.server.responses import ErrorInfo, ErrorResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("floodway.engine.server")

_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class APIError(Exception):
    """An error the API returns as is: status code, message, OpenAI error type, param, code."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = ErrorResponse(error=ErrorInfo(message=self.message, type=self.type, param=self.param, code=self.code))
        return JSONResponse(body.model_dump(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def param_of(message: str) -> str | None:
    """Engine ValueErrors start with the field name ('max_tokens must be ...'): use it as `param`."""
    first = message.split(" ", 1)[0]
    return first if _FIELD.match(first) else None


def loc_to_param(loc) -> str | None:
    """('body', 'messages', 0, 'role') -> 'messages.0.role', ('body', 'logit_bias', '5') -> 'logit_bias.5' (a
    token id key); drops pydantic's union tags ('str', 'list[int]')."""
    parts = []
    for p in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(p, int) or (isinstance(p, str) and (p.isdigit() or _FIELD.match(p) and p not in _TYPE_TAGS)):
            parts.append(str(p))
        else:
            break
    return ".".join(parts) or None


def validation_error(errors: list[dict]) -> APIError:
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {}).get("error", "")
        return bad_request(f"Invalid JSON body: {detail}".rstrip(": "), code="invalid_json")
    if not errors:
        return bad_request("Invalid request")
    located = loc_to_param(errors[0].get("loc", ()))
    msgs = []
    # Our own checks (value_error) say most; in a union they come first, without pydantic's prefix.
    for e in sorted(errors, key=lambda e: e.get("type") != "value_error"):
        msg = str(e.get("msg")).removeprefix("Value error, ")
        if loc_to_param(e.get("loc", ())) == located and msg not in msgs:
            msgs.append(msg)
    # A check across fields has no location: its message names the field first.
    param = located or (param_of(msgs[0]) if msgs and errors[0].get("type") == "value_error" else None)
    where = f"'{param}'" if param else "the request body"
    return bad_request(f"Invalid value for {where}: {'; or '.join(msgs[:3])}", param=param, code="invalid_value")


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, (ValueError, RecursionError)):
            # a body the JSON parser refused beyond syntax: bad UTF-8, nesting too deep, an integer too long
            return bad_request(f"Invalid JSON body: {exc.__cause__}", code="invalid_json").response()
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return APIError(exc.status_code, str(exc.detail), type=kind, headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return APIError(500, f"Internal error: {type(exc).__name__}", type="internal_error").response()
