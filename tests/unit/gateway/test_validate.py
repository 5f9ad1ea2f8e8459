"""The gateway refuses what the engines refuse (the same models), tells an error answer from a crash, and sends
the overflow API no body larger than the client's."""

import json

import pytest
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.payload import is_error_body, overflow_body
from floodway.operator.gateway.validate import refusal


@pytest.mark.parametrize("path,payload,param", [
    ("/v1/completions", {"prompt": "a\udcffb"}, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "\ud800"}]}, "messages.0.content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools.0.function"),
    ("/v1/completions", {"prompt": "x", "logprobs": 6}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "temperature": float("nan")}, "temperature"),
])
def test_requests_the_engines_refuse_get_their_400_at_the_gateway(path, payload, param):
    response = refusal(path, payload)
    assert response is not None and response.status_code == 400
    assert json.loads(response.body)["error"]["param"] == param


def test_valid_requests_pass():
    assert refusal("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True}) is None
    assert refusal("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}) is None


@pytest.mark.parametrize("content,answer", [
    (b'{"error": {"message": "bad", "type": "internal_error"}}', True),
    (b"Internal Server Error", False), (b"", False), (b'{"error": "text"}', False), (b"[" * 5000, False),
])
def test_an_error_body_is_an_answer_anything_else_a_crash(content, answer):
    assert is_error_body(content) is answer


def test_overflow_body_is_no_larger_than_the_clients():
    payload = {"prompt": "\u00e9\u4e2d" * 1000, "model": "local"}
    client = json.dumps(payload, ensure_ascii=False).encode()
    sent = overflow_body("/v1/completions", payload, "remote")
    assert json.loads(sent)["model"] == "remote" and len(sent) <= len(client) + len("remote")


def test_debug_state_is_off_and_bodies_bounded_by_default():
    config = GatewayConfig(backends={"static": ["http://127.0.0.1:1"]})
    assert config.debug_state is False and config.max_body_bytes == 4 * 2**20


def test_a_lone_surrogate_in_a_field_no_model_reads_travels_escaped():
    payload = {"messages": [], "metadata": {"k": "\ud800"}}
    assert json.loads(overflow_body("/v1/chat/completions", payload, None))["metadata"]["k"] == "\ud800"
