"""Validation against the official OpenAI OpenAPI spec (the subset vendored in tests/data/openai-openapi/).

validate_openai(obj, component) checks one body against a component schema (e.g. "CreateChatCompletionResponse",
"ErrorResponse", "ListModelsResponse", "Model"); validate_stream(chunks, component) checks each parsed SSE chunk
(without `[DONE]`) and what the spec says about a stream as a whole; validate_reply(url, status, text) checks one
answer of an endpoint as a client read it, streamed or not, error or not. Tests get them as fixtures of the same names
(tests/conftest.py), since pytest's importlib mode puts no test folder on sys.path.
"""

import functools
import json
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema

SCHEMAS = Path(__file__).with_name("data") / "openai-openapi" / "schemas.json"
# The spec has no stream schema for legacy completions; OpenAI streams CreateCompletionResponse's shape with
# finish_reason null until the last chunk of each choice, and a usage chunk with no choices.
COMPLETION_STREAM = "CreateCompletionStreamResponse"
FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter", "function_call"}
# endpoint -> (its response's component, its stream chunks' component)
ENDPOINTS = {"/v1/completions": ("CreateCompletionResponse", "CreateCompletionResponse"),
             "/v1/chat/completions": ("CreateChatCompletionResponse", "CreateChatCompletionStreamResponse"),
             "/v1/models": ("ListModelsResponse", None)}


@functools.cache
def _document() -> dict:
    doc = json.loads(SCHEMAS.read_text())
    schemas = doc["components"]["schemas"]
    # The spec's one gap found against OpenAI itself: with echo, the prompt's first token has no logprob, and
    # OpenAI (as vLLM) sends null in token_logprobs and top_logprobs there; allow null entries in both.
    logprobs = schemas["CreateCompletionResponse"]["properties"]["choices"]["items"]["properties"]["logprobs"]
    for name in ("token_logprobs", "top_logprobs"):
        items = logprobs["anyOf"][0]["properties"][name]["items"]
        logprobs["anyOf"][0]["properties"][name]["items"] = {"anyOf": [items, {"type": "null"}]}
    stream = json.loads(json.dumps(schemas["CreateCompletionResponse"]))
    reason = stream["properties"]["choices"]["items"]["properties"]["finish_reason"]
    reason["type"], reason["enum"] = ["string", "null"], [*reason["enum"], None]
    schemas[COMPLETION_STREAM] = stream
    return doc


@functools.cache
def _validator(component: str) -> jsonschema.Draft202012Validator:
    doc = _document()
    if component not in doc["components"]["schemas"]:
        raise KeyError(f"{component} is not in the vendored subset; add it to extract.py's ROOTS")
    schema = {**doc, "$ref": f"#/components/schemas/{component}"}
    return jsonschema.Draft202012Validator(schema)


def validate_openai(obj: dict, component: str) -> None:
    """Raises AssertionError listing every violation of `component` in `obj`."""
    errors = sorted(_validator(component).iter_errors(obj), key=lambda e: list(e.absolute_path))
    assert not errors, f"not a valid {component}:\n" + "\n".join(
        f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors
    ) + f"\nbody: {json.dumps(obj)[:2000]}"


def validate_stream(chunks: list[dict], component: str, *, error_ends: bool = False) -> None:
    """Every chunk valid, one id for all; per choice index: `delta.role` (chat) only in its first chunk, exactly one
    finish_reason and nothing after it; a usage chunk (no choices) only last. With error_ends, the stream must end
    with an error event (ErrorResponse) instead of finishing every choice, as an interrupted stream does."""
    if component == "CreateCompletionResponse":
        component = COMPLETION_STREAM
    assert chunks, "empty stream"
    if error_ends:
        validate_openai(chunks[-1], "ErrorResponse")
        chunks = chunks[:-1]
    assert not any("error" in c for c in chunks), f"error event inside the stream: {chunks}"
    for chunk in chunks:
        validate_openai(chunk, component)
    assert len({c["id"] for c in chunks}) <= 1, "chunks carry different ids"
    seen: set[int] = set()
    finished: set[int] = set()
    for i, chunk in enumerate(chunks):
        if not chunk["choices"]:
            assert chunk.get("usage") and i == len(chunks) - 1, f"chunk {i} has no choices and is not the usage chunk"
            continue
        for choice in chunk["choices"]:
            index = choice["index"]
            assert index not in finished, f"choice {index} continues after its finish_reason (chunk {i})"
            if "delta" in choice:
                first = index not in seen
                assert ("role" in choice["delta"]) == first, (
                    f"choice {index}: delta.role must be in its first chunk only (chunk {i}: {choice['delta']})")
            seen.add(index)
            if choice.get("finish_reason") is not None:
                assert choice["finish_reason"] in FINISH_REASONS
                finished.add(index)
    if not error_ends:
        assert finished == seen, f"choices {sorted(seen - finished)} never finished"


def validate_reply(url, status: int | None = None, text: str | None = None) -> dict | list[dict]:
    """One answer as a client read it (`url`, its status and its text, or an httpx.Response): an error status carries
    an ErrorResponse; a 200 is the endpoint's response or, streamed, chunks that validate_stream accepts ending with
    `[DONE]`, or ending with an error event (a stream cut after bytes reached the client; `[DONE]` may follow).
    Returns the body, or the chunks."""
    if not isinstance(url, str):  # an httpx.Response
        url, status, text = str(url.request.url), url.status_code, url.text
    if status != 200:
        body = json.loads(text)
        validate_openai(body, "ErrorResponse")
        return body
    whole, chunk = ENDPOINTS[urlsplit(url).path]
    if not text.startswith("data:"):
        body = json.loads(text)
        validate_openai(body, whole)
        return body
    events = [line[len("data:"):].strip() for line in text.splitlines() if line.startswith("data:")]
    done = events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1 if done else None]]
    cut = bool(chunks) and "error" in chunks[-1]
    assert done or cut, f"the stream ended with neither [DONE] nor an error event: {text[-500:]}"
    validate_stream(chunks, chunk, error_ends=cut)
    return chunks
