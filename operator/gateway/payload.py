"""Pure helpers on request and response bodies: token estimates for the overflow budget, OpenAI-shaped
error bodies, and the rewrite of a request for the overflow API."""

from __future__ import annotations

import json

DEFAULT_MAX_TOKENS = 16  # the OpenAI completions default, also used when a chat request names none
CHARS_PER_TOKEN = 4  # rough BPE average; the budget needs an estimate before any tokenizer runs


def _text_chars(payload: dict) -> int:
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list):  # a list of strings, or token ids (each id is a token: count it as 4 chars)
        return sum(len(p) if isinstance(p, str) else CHARS_PER_TOKEN for p in prompt)
    chars = 0
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return chars


def estimate_prompt_tokens(payload: dict) -> int:
    """Prompt tokens: characters / 4, rounded up."""
    return -(-_text_chars(payload) // CHARS_PER_TOKEN)


def estimate_tokens(payload: dict) -> int:
    """Prompt tokens plus the completion tokens the request may use."""
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens") or DEFAULT_MAX_TOKENS
    limit = limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_TOKENS
    return estimate_prompt_tokens(payload) + limit


def error_body(message: str, type_: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def sse_error_event(message: str, code: str) -> bytes:
    """The event that ends a stream whose backend failed after bytes reached the client."""
    return b"data: " + json.dumps(error_body(message, "server_error", code)).encode() + b"\n\n"


def overflow_body(payload: dict, model: str | None) -> bytes:
    """The request as sent to the overflow API: the configured model name in place of the client's."""
    body = payload if model is None else {**payload, "model": model}
    try:  # not ASCII-escaped: no larger than the client's body
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate in a field no model reads: only a JSON escape carries it
        return json.dumps(body).encode()


def is_error_body(content: bytes) -> bool:
    """Whether a response body is an OpenAI-shaped error ({"error": {...}}): an answer, not a crash."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)
