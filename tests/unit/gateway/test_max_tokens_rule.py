"""The completion limit a request names is read by one rule (engine/server/max_tokens.py) in the gateway and the
engine: max_completion_tokens where present, else max_tokens."""

import subprocess
import sys

import pytest
from floodway.engine.server.max_tokens import DEFAULT_MAX_TOKENS, requested_max_tokens
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from floodway.engine.server.serving import chat_max_tokens
from floodway.operator.gateway.payload import completion_limit, estimate_tokens

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("limits", [{"max_tokens": 7}, {"max_completion_tokens": 5}, {"max_completion_tokens": 5,
                                    "max_tokens": 9}, {"max_completion_tokens": 9, "max_tokens": 5}])
def test_the_gateway_and_the_engine_read_the_same_limit(limits):
    payload = {"messages": MESSAGES, **limits}
    engine = chat_max_tokens(ChatCompletionRequest.model_validate(payload), prompt_len=10, max_model_len=1000)
    assert completion_limit(payload) == engine == limits.get("max_completion_tokens", limits.get("max_tokens"))


def test_a_request_naming_no_limit():
    payload = {"messages": MESSAGES}
    assert requested_max_tokens(None, None) is None and completion_limit(payload) is None
    # The engine lets a chat request use the context the prompt leaves; the gateway charges the budget the default.
    assert chat_max_tokens(ChatCompletionRequest.model_validate(payload), 10, 1000) == 990
    assert estimate_tokens(payload) == 1 + DEFAULT_MAX_TOKENS
    assert CompletionRequest.model_validate({"prompt": "hi"}).max_tokens == DEFAULT_MAX_TOKENS


def test_both_sides_import_the_rule_without_torch():
    code = ("import sys, floodway.engine.server.max_tokens, floodway.operator.gateway.payload; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
