import subprocess
import sys

import pytest
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from pydantic import ValidationError


def test_protocol_import_is_torch_free():
    code = ("import sys, floodway.engine.server.protocol, floodway.engine.server; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("prompt,expected", [
    ("hi", ["hi"]), ([1, 2], [[1, 2]]), (["hi"], ["hi"]), ([[3, 4]], [[3, 4]]), (["a", "b"], ["a", "b"]),
    ([[3], [4, 5]], [[3], [4, 5]]),
])
def test_prompts_accepts_text_ids_and_lists_of_either(prompt, expected):
    assert CompletionRequest(prompt=prompt).prompts() == expected


@pytest.mark.parametrize("fields,message", [
    ({"max_tokens": 0}, "accepted with echo"),
    ({"prompt": ["a", "b"], "n": 2, "best_of": 3}, "one prompt only"),
    ({"prompt": ["a"] * 32, "n": 5}, "over 128 choices"),
    ({"prompt": ["a"] * 33}, "at most 32"),
])
def test_what_several_prompts_and_max_tokens_0_need(fields, message):
    with pytest.raises(ValidationError, match=message):
        CompletionRequest(**{"prompt": "x", **fields})
    assert CompletionRequest(prompt=["a", "b"], max_tokens=0, echo=True, n=2).max_tokens == 0


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.1), ("temperature", 2.5), ("temperature", float("nan")), ("temperature", True),
    ("top_p", 0), ("top_p", 1.01), ("top_k", -2), ("max_tokens", -1), ("max_tokens", 1.5), ("n", 0),
    ("logprobs", 6), ("stop", [""]), ("stop", ["a"] * 17), ("stream", "true"), ("presence_penalty", 2.1),
    ("frequency_penalty", -3), ("repetition_penalty", 0), ("min_tokens", -1), ("logit_bias", {"x": 1}),
    ("logit_bias", {"5": -100.5}), ("seed", 2**63), ("echo", "no"), ("suffix", "x"),
])
def test_out_of_range_values_are_rejected_naming_the_field(field, value):
    with pytest.raises(ValidationError) as e:
        CompletionRequest(prompt="x", **{field: value})
    assert e.value.errors()[0]["loc"][0] == field


def test_unknown_fields_are_ignored_and_defaults_apply():
    r = CompletionRequest(prompt="x", best_of=1, logit_bias={})
    assert r.max_tokens == 16 and r.n == 1 and r.stop_list() == [] and r.model is None
    assert CompletionRequest(prompt="x", stop="END").stop_list() == ["END"]


def test_chat_messages_accept_text_parts_and_reject_bad_roles():
    r = ChatCompletionRequest(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                     {"type": "text", "text": "b"}]}])
    assert r.messages[0].text() == "ab"
    with pytest.raises(ValidationError):
        ChatCompletionRequest(messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(ValidationError):
        ChatCompletionRequest(messages=[])


SURROGATE = "a\udcffb"  # what json.loads makes of the valid JSON string "a\udcffb"


@pytest.mark.parametrize("model,body,param", [
    (CompletionRequest, {"prompt": SURROGATE}, "prompt"),
    (CompletionRequest, {"prompt": [SURROGATE]}, "prompt"),
    (CompletionRequest, {"prompt": "x", "stop": [SURROGATE]}, "stop"),
    (CompletionRequest, {"prompt": "x", "model": SURROGATE}, "model"),
    (CompletionRequest, {"prompt": "x", "user": "\ud800"}, "user"),
    (ChatCompletionRequest, {"messages": [{"role": "user", "content": SURROGATE}]}, "messages"),
    (ChatCompletionRequest, {"messages": [{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]},
     "messages"),
    (ChatCompletionRequest, {"messages": [{"role": "user", "content": "x", "name": SURROGATE}]}, "messages"),
])
def test_lone_surrogates_are_refused_naming_the_field(model, body, param):
    with pytest.raises(ValidationError) as e:
        model.model_validate(body)
    assert e.value.errors()[0]["loc"][0] == param
    assert any("lone surrogate U+D" in err["msg"] for err in e.value.errors())


@pytest.mark.parametrize("model,field,value", [
    (CompletionRequest, "tools", [{"type": "function", "function": {"name": "f"}}]),  # chat only
    (ChatCompletionRequest, "functions", [{"name": "f"}]),
])
def test_fields_that_would_change_the_answer_are_refused_not_dropped(model, field, value):
    base = {"prompt": "x"} if model is CompletionRequest else {"messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(ValidationError) as e:
        model.model_validate({**base, field: value})
    assert e.value.errors()[0]["loc"][0] == field and "not" in e.value.errors()[0]["msg"]


def test_harmless_forms_of_unsupported_fields_pass():
    CompletionRequest.model_validate({"prompt": "x", "tools": None, "logit_bias": {}, "logprobs": 0, "best_of": 1})
    ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "tools": [],
                                          "top_logprobs": 0, "logprobs": True})
