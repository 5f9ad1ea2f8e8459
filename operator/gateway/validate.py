"""The engine's own request models, run at the gateway before routing: a request an engine would refuse (a bad
value, invalid Unicode, a field this API does not honour such as `functions`) gets the same 400 here on every
path, so nothing reaches the overflow API that a local engine would refuse, and a request behaves the same
whether or not the pool is loaded. About 5 us per request."""

from __future__ import annotations

from floodway.engine.server.errors import validation_error
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from pydantic import ValidationError
from starlette.responses import JSONResponse

_MODELS = {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatCompletionRequest}


def refusal(path: str, payload: dict) -> JSONResponse | None:
    """The 400 for a request the engines' API refuses, or None."""
    try:
        _MODELS[path].model_validate(payload)
    except ValidationError as e:
        return validation_error(list(e.errors())).response()
    return None
