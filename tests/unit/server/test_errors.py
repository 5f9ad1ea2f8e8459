import pytest
from floodway.engine.server.errors import loc_to_param, param_of, validation_error


@pytest.mark.parametrize("loc,param", [
    (("body", "temperature"), "temperature"),
    (("body", "messages", 0, "role"), "messages.0.role"),
    (("body", "prompt", "list[constrained-int]", 0), "prompt"),
    (("body", "stop", "str"), "stop"),
    (("body", "logit_bias", "5"), "logit_bias.5"),
    (("body",), None),
])
def test_loc_to_param_names_the_field_without_union_tags(loc, param):
    assert loc_to_param(loc) == param


def test_param_of_reads_the_field_from_engine_messages():
    assert param_of("max_tokens must be an integer >= 1, got 0") == "max_tokens"
    assert param_of("prompt (300 tokens) + max_tokens ...") == "prompt"
    assert param_of("(weird) message") is None


def test_invalid_json_is_reported_as_such():
    err = validation_error([{"type": "json_invalid", "loc": ("body", 12), "msg": "JSON decode error",
                             "ctx": {"error": "Expecting value"}}])
    assert err.status == 400 and err.code == "invalid_json" and "Expecting value" in err.message


def test_union_errors_for_one_field_are_merged_into_one_message():
    err = validation_error([
        {"type": "string_type", "loc": ("body", "stop", "str"), "msg": "Input should be a valid string"},
        {"type": "too_long", "loc": ("body", "stop", "list[str]"), "msg": "List should have at most 16 items"},
        {"type": "int_type", "loc": ("body", "seed"), "msg": "Input should be a valid integer"},
    ])
    assert err.param == "stop" and err.status == 400
    assert "valid string" in err.message and "at most 16" in err.message and "seed" not in err.message


def test_error_body_is_openai_shaped():
    import json

    resp = validation_error([{"type": "missing", "loc": ("body", "prompt"), "msg": "Field required"}]).response()
    body = json.loads(resp.body)
    assert resp.status_code == 400
    assert body == {"error": {"message": "Invalid value for 'prompt': Field required",
                              "type": "invalid_request_error", "param": "prompt", "code": "invalid_value"}}


def test_a_check_across_fields_names_the_field_its_message_starts_with():
    e = validation_error([{"type": "value_error", "loc": ("body",), "msg": "Value error, max_tokens 0 needs echo"}])
    assert e.param == "max_tokens" and e.message == "Invalid value for 'max_tokens': max_tokens 0 needs echo"
    e = validation_error([{"type": "value_error", "loc": ("body",), "msg": "Value error, tools: names repeat"}])
    assert e.param is None and "tools: names repeat" in e.message
