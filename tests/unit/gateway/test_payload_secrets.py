import json
import os

import pytest
from floodway.operator.gateway.payload import (
    completion_limit,
    error_body,
    estimate_tokens,
    overflow_body,
    sse_error_event,
)
from floodway.operator.gateway.secrets import ApiKey


def test_estimate_tokens():
    assert estimate_tokens({"prompt": "abcdefgh", "max_tokens": 10}) == 2 + 10
    assert estimate_tokens({"prompt": "abc"}) == 1 + 16
    assert estimate_tokens({"prompt": [1, 2, 3], "max_tokens": 1}) == 3 + 1
    chat = {"messages": [{"role": "user", "content": "abcd"}, {"role": "user", "content": [{"type": "text",
                                                                                             "text": "efgh"}]}],
            "max_completion_tokens": 5}
    assert estimate_tokens(chat) == 2 + 5
    assert estimate_tokens({"prompt": "a", "max_tokens": "lots"}) == 1 + 16


def test_completion_limit_is_the_limit_a_request_names_or_none():
    assert completion_limit({"max_tokens": 10}) == 10
    assert completion_limit({"max_completion_tokens": 5, "max_tokens": 10}) == 5
    assert completion_limit({"messages": []}) is None
    for bad in ("lots", 0, -3, True, 2.5, None):
        assert completion_limit({"max_tokens": bad}) is None


def test_overflow_body_rewrites_the_model_and_keeps_only_openai_fields():
    body = json.loads(overflow_body("/v1/completions", {"model": "chat", "prompt": "x", "n": 2}, "small"))
    assert body == {"model": "small", "prompt": "x", "n": 2}
    assert json.loads(overflow_body("/v1/completions", {"model": "chat"}, None)) == {"model": "chat"}
    extras = {"top_k": 5, "min_tokens": 2, "repetition_penalty": 1.1, "ignore_eos": True, "stop_token_ids": [1],
              "guided_json": {}, "guided_choice": ["a"]}
    chat = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "response_format": {"type": "json_object"},
            "top_logprobs": 2, "logit_bias": {"1": 1}}
    assert json.loads(overflow_body("/v1/chat/completions", {**chat, **extras}, None)) == chat


def test_error_shapes():
    assert error_body("m", "t", "c") == {"error": {"message": "m", "type": "t", "param": None, "code": "c"}}
    event = sse_error_event("boom", "backend_failed")
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(event[6:])["error"]["code"] == "backend_failed"


def test_api_key_from_env_and_scrub(monkeypatch):
    monkeypatch.setenv("GW_TEST_KEY", "sk-secret-123")
    key = ApiKey("GW_TEST_KEY", None)
    assert key.get() == "sk-secret-123"
    assert key.scrub("bad key sk-secret-123 given") == "bad key *** given"
    monkeypatch.delenv("GW_TEST_KEY")
    with pytest.raises(ValueError, match="GW_TEST_KEY is not set") as e:
        key.get()
    assert "sk-secret" not in str(e.value)
    assert ApiKey(None, None).get() is None


def test_api_key_file_is_reread_when_rotated(tmp_path):
    path = tmp_path / "key"
    path.write_text("first\n")
    key = ApiKey(None, str(path))
    assert key.get() == "first"
    path.write_text("second-key\n")


    os.utime(path, (1, 1))
    assert key.get() == "second-key"
    with pytest.raises(ValueError, match="unreadable"):
        ApiKey(None, str(tmp_path / "missing")).get()
