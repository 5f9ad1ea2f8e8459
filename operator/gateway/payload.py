"""Pure helpers on request and response bodies: token estimates for the overflow budget, OpenAI-shaped
error bodies, and the rewrite of a request for the overflow API (its model, and only the OpenAI API's fields)."""

from __future__ import annotations

import json

from floodway.engine.server.max_tokens import DEFAULT_MAX_TOKENS, requested_max_tokens

# The top-level request fields the OpenAI API defines (its spec's CreateCompletionRequest and
# CreateChatCompletionRequest; tests/unit/gateway/test_payload_openai_fields.py checks them against the vendored
# spec). Local engines get every field; the overflow API only these, so vLLM-only extras (top_k, min_tokens,
# repetition_penalty, ignore_eos, stop_token_ids, guided_*, ...) cannot make a strict API refuse the request.
OPENAI_REQUEST_FIELDS = {
    "/v1/completions": frozenset({
        "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "model", "n",
        "presence_penalty", "prompt", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p",
        "user"}),
    "/v1/chat/completions": frozenset({
        "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
        "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model", "moderation", "n",
        "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_options",
        "prompt_cache_retention", "reasoning_effort", "response_format", "safety_identifier", "seed",
        "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
        "top_logprobs", "top_p", "user", "verbosity", "web_search_options"}),
}
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


def completion_limit(payload: dict) -> int | None:
    """The completion tokens the request allows (requested_max_tokens); None where it names no valid limit."""
    limit = requested_max_tokens(payload.get("max_completion_tokens"), payload.get("max_tokens"))
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def estimate_tokens(payload: dict) -> int:
    """Prompt tokens plus the completion tokens the request may use (a chat request that names none is charged the
    completions default: its real use is unknown before it ends)."""
    return estimate_prompt_tokens(payload) + (completion_limit(payload) or DEFAULT_MAX_TOKENS)


def error_body(message: str, type_: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def sse_error_event(message: str, code: str) -> bytes:
    """The event that ends a stream whose backend failed after bytes reached the client."""
    return b"data: " + json.dumps(error_body(message, "server_error", code)).encode() + b"\n\n"


def overflow_body(path: str, payload: dict, model: str | None) -> bytes:
    """The request as sent to the overflow API: only the fields the OpenAI API defines for `path`, and the
    configured model name in place of the client's."""
    allowed = OPENAI_REQUEST_FIELDS[path]
    body = {k: v for k, v in payload.items() if k in allowed}
    if model is not None:
        body["model"] = model
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
