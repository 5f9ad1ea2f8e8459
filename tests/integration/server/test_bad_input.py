"""Every bad input gets a 4xx with an OpenAI-shaped error naming the problem, and the engine keeps serving."""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

MODEL = "floodway/tiny-llama"
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]

# (path, JSON body or raw bytes, status, param, code or None, words the message must contain)
CASES = [
    (CMPL, b'{"prompt": "hi", ', 400, None, "invalid_json", "Invalid JSON"),
    (CMPL, b"[1, 2]", 400, None, "invalid_value", "request body"),
    (CMPL, {"prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens", "invalid_value", "integer"),
    (CMPL, {"prompt": "hi", "max_tokens": -1}, 400, "max_tokens", "invalid_value", "greater than or equal to 0"),
    (CMPL, {"prompt": "hi", "max_tokens": 0}, 400, "max_tokens", "invalid_value", "accepted with echo"),
    (CMPL, {"prompt": "hi", "temperature": -0.5}, 400, "temperature", "invalid_value", "greater than or equal to 0"),
    (CMPL, {"prompt": "hi", "temperature": "hot"}, 400, "temperature", "invalid_value", "number"),
    (CMPL, {"prompt": "hi", "top_p": 0}, 400, "top_p", "invalid_value", "greater than 0"),
    (CMPL, {"prompt": "hi", "top_p": 1.5}, 400, "top_p", "invalid_value", "less than or equal to 1"),
    (CMPL, {"prompt": "hi", "top_k": -2}, 400, "top_k", "invalid_value", "greater than or equal to -1"),
    (CMPL, {"prompt": "hi", "n": 129}, 400, "n", "invalid_value", "less than or equal to 128"),
    (CMPL, {"prompt": "hi", "stop": [1, 2]}, 400, "stop", "invalid_value", "string"),
    (CMPL, {"prompt": "hi", "seed": "abc"}, 400, "seed", "invalid_value", "integer"),
    (CMPL, {"prompt": "hi", "presence_penalty": 2.5}, 400, "presence_penalty", "invalid_value", "less than"),
    (CMPL, {"prompt": "hi", "echo": "yes"}, 400, "echo", "invalid_value", "boolean"),
    (CMPL, {"prompt": "hi", "stream": "yes"}, 400, "stream", "invalid_value", "boolean"),
    (CMPL, {"max_tokens": 3}, 400, "prompt", "invalid_value", "Field required"),
    (CMPL, {"prompt": ""}, 400, "prompt", None, "empty"),
    (CMPL, {"prompt": []}, 400, "prompt", "invalid_value", "at least 1"),
    (CMPL, {"prompt": ["a"] * 33}, 400, "prompt", "invalid_value", "at most 32"),
    (CMPL, {"prompt": ["a", "b"], "n": 2, "best_of": 3}, 400, "best_of", "invalid_value", "one prompt only"),
    (CMPL, {"prompt": [1, 99999]}, 400, "prompt", None, "vocabulary"),
    (CMPL, {"prompt": "hi", "model": "gpt-4"}, 404, "model", "model_not_found", "gpt-4"),
    (CMPL, {"prompt": "hi " * 300, "max_tokens": 4}, 400, "prompt", "context_length_exceeded", "maximum context"),
    (CMPL, {"prompt": "hi", "max_tokens": 300}, 400, "prompt", "context_length_exceeded", "max_tokens"),
    (CMPL, {"prompt": "hi", "stop_token_ids": [99999]}, 400, "stop_token_ids", None, "vocabulary"),
    # lone surrogates: valid JSON escapes, invalid Unicode (the tokenizer raised TypeError: a 500)
    (CMPL, b'{"prompt": "a\\udcffb"}', 400, "prompt", "invalid_value", "lone surrogate U+DCFF"),
    (CMPL, b'{"prompt": ["\\ud800"]}', 400, "prompt", "invalid_value", "lone surrogate U+D800"),
    (CMPL, b'{"prompt": "hi", "stop": ["\\udfff"]}', 400, "stop", "invalid_value", "lone surrogate"),
    (CHAT, b'{"messages": [{"role": "user", "content": "\\udcff"}]}', 400, "messages.0.content", "invalid_value",
     "lone surrogate"),
    (CHAT, b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "x\\udc00"}]}]}', 400,
     "messages.0.content", "invalid_value", "lone surrogate"),
    # bytes the JSON parser refuses beyond its syntax
    (CMPL, b'{"prompt": "a\xffb"}', 400, None, "invalid_json", "utf-8"),
    (CMPL, b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}", 400, None, "invalid_json", "digits"),
    (CMPL, b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None, "invalid_json", "recursion"),
    (CMPL, {"prompt": "hi", "max_tokens": 10**30}, 400, "prompt", "context_length_exceeded", "max_tokens"),
    # fields that would change the answer are refused, not dropped
    (CMPL, {"prompt": "hi", "logprobs": 6}, 400, "logprobs", "invalid_value", "less than or equal to 5"),
    (CMPL, {"prompt": "hi", "n": 3, "best_of": 2}, 400, "best_of", "invalid_value", "must be >= n"),
    (CHAT, {"messages": USER, "top_logprobs": 2}, 400, "top_logprobs", "invalid_value", "needs logprobs"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools",
     "tools_not_supported", "no tool support"),  # the tiny model's template never reads `tools`
    (CHAT, {"messages": USER, "response_format": {"type": "xml"}}, 400, "response_format.type", "invalid_value",
     "json_schema"),
    (CHAT, {"messages": USER, "guided_regex": "(a"}, 400, "guided_regex", None, "parenthesis"),
    (CHAT, {"messages": USER, "logit_bias": {"5": 101}}, 400, "logit_bias.5", "invalid_value", "less than"),
    (CHAT, {"messages": []}, 400, "messages", "invalid_value", "at least 1"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", "invalid_value", "'user'"),
    (CHAT, {"messages": [{"content": "x"}]}, 400, "messages.0.role", "invalid_value", "Field required"),
    (CHAT, {"messages": USER, "max_completion_tokens": -1}, 400, "max_completion_tokens", "invalid_value", ">= 1"),
    (CHAT, {"messages": USER, "model": "other"}, 404, "model", "model_not_found", "other"),
    (CHAT, {"messages": USER, "top_logprobs": 50}, 400, "top_logprobs", "invalid_value", "20"),
    (CHAT, {"messages": [{"role": "user", "content": "word " * 300}]}, 400, "messages", "context_length_exceeded",
     "maximum context"),
]


@pytest.mark.parametrize("path,body,status,param,code,words", CASES,
                         ids=[f"{c[0].split('/')[-1]}-{i}-{c[3]}" for i, c in enumerate(CASES)])
def test_bad_input_gets_openai_error(engine_server, path, body, status, param, code, words, validate_reply):
    if isinstance(body, bytes):
        r = httpx.post(engine_server.url + path, content=body, headers={"content-type": "application/json"})
    else:
        r = httpx.post(engine_server.url + path, json=body, timeout=30)
    assert r.status_code == status, r.text
    err = validate_reply(r)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and err["type"] == "invalid_request_error"
    if code is not None:
        assert err["code"] == code
    assert words.replace(">= 1", "greater than or equal to 1") in err["message"], err["message"]


def test_oversized_body_gets_413(engine_server, validate_reply):
    big = b'{"prompt": "' + b"a" * (5 * 2**20) + b'"}'
    r = httpx.post(engine_server.url + CMPL, content=big, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413
    assert validate_reply(r)["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit still applies while reading
        for _ in range(6):
            yield b"a" * 2**20

    r = httpx.post(engine_server.url + CMPL, content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413
    validate_reply(r)


def test_unknown_route_and_method_are_openai_shaped(engine_server, validate_reply):
    r = httpx.get(engine_server.url + "/v1/nothing")
    assert r.status_code == 404 and validate_reply(r)["error"]["message"]
    r = httpx.get(engine_server.url + CMPL)
    assert r.status_code == 405 and validate_reply(r)["error"]["type"] == "invalid_request_error"


def test_engine_still_serves_after_bad_input(engine_server, validate_reply):
    assert httpx.get(engine_server.url + "/health").status_code == 200
    r = httpx.post(engine_server.url + CMPL, json={"model": MODEL, "prompt": "ok", "max_tokens": 2}, timeout=30)
    assert r.status_code == 200 and validate_reply(r)["usage"]["completion_tokens"] >= 1


def test_health_answers_while_multi_mb_prompts_are_handled(engine_server, validate_reply):
    """A 4 MB prompt used to be tokenized on the event loop: /health stalled for seconds, past a readiness
    probe's timeout. Now a prompt too long in characters for the context is refused before tokenizing, and
    tokenizing happens in its own thread. Each probe sent while the big request is in flight must answer
    within 3 s (a generous bound: the probe's own timeout is 1 s)."""
    text = "hello world " * 340_000  # 4.08 MB: under the 4 MiB body limit
    bodies = [(CMPL, {"prompt": text}), (CHAT, {"messages": [{"role": "user", "content": text}]})]
    with ThreadPoolExecutor(1) as pool:
        for path, body in bodies:
            pending = pool.submit(httpx.post, engine_server.url + path, json=body, timeout=120)
            probes = []
            while not pending.done() or not probes:
                started = time.monotonic()
                assert httpx.get(engine_server.url + "/health", timeout=30).status_code == 200
                probes.append(time.monotonic() - started)
            assert max(probes) < 3.0, probes
            r = pending.result()
            assert r.status_code == 400, r.text[:300]
            err = validate_reply(r)["error"]
            assert err["code"] == "context_length_exceeded", err
            assert err["param"] == ("prompt" if path == CMPL else "messages")
