"""Request -> output constraint, and model output -> OpenAI tool calls (pure functions, no model)."""

import json

import pytest
from floodway.engine.server import constraints, tools
from floodway.engine.server.errors import APIError
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from floodway.engine.structured import StructuredSpec
from pydantic import ValidationError

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NOARGS = {"type": "function", "function": {"name": "ping"}}
MSGS = [{"role": "user", "content": "hi"}]


def chat(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=MSGS, **kw)


@pytest.mark.parametrize("kw, spec", [
    ({}, None),
    ({"response_format": {"type": "text"}}, None),
    ({"response_format": {"type": "json_object"}}, StructuredSpec("json_object")),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}},
     StructuredSpec("json_schema", {"type": "integer"})),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, StructuredSpec("json_object")),
    ({"guided_json": '{"type": "boolean"}'}, StructuredSpec("json_schema", {"type": "boolean"})),
    ({"guided_regex": "a+"}, StructuredSpec("regex", "a+")),
    ({"guided_choice": ["a", "b"]}, StructuredSpec("choice", ["a", "b"])),
    ({"guided_grammar": 'root ::= "x"'}, StructuredSpec("grammar", 'root ::= "x"')),
    ({"structured_outputs": {"json_object": True}}, StructuredSpec("json_object")),
    ({"structured_outputs": {"json": {"type": "null"}}}, StructuredSpec("json_schema", {"type": "null"})),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     StructuredSpec("json_schema", WEATHER["function"]["parameters"])),
    ({"tools": [WEATHER], "tool_choice": "auto"}, None),
    ({"tools": [WEATHER], "tool_choice": "none"}, None),
])
def test_the_one_constraint_of_a_request(kw, spec):
    assert constraints.structured_spec(chat(**kw)) == spec


def test_required_forces_an_array_of_calls_to_the_tools():
    spec = constraints.structured_spec(chat(tools=[WEATHER, NOARGS], tool_choice="required", parallel_tool_calls=False))
    assert spec.kind == "json_schema" and spec.payload["minItems"] == 1 and spec.payload["maxItems"] == 1
    names = [c["properties"]["name"]["enum"] for c in spec.payload["items"]["anyOf"]]
    assert names == [["get_weather"], ["ping"]]
    assert spec.payload["items"]["anyOf"][1]["properties"]["parameters"] == tools.NO_PARAMETERS


@pytest.mark.parametrize("kw, param", [
    ({"guided_json": "{nope"}, "guided_json"),
    ({"guided_json": "[1]"}, "guided_json"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "tools": [WEATHER], "tool_choice": "required"}, "response_format"),
    ({"structured_outputs": {"regex": "a", "grammar": "b"}}, "structured_outputs"),
])
def test_malformed_or_several_constraints_are_400(kw, param):
    with pytest.raises(APIError) as e:
        constraints.structured_spec(chat(**kw))
    assert e.value.status == 400 and e.value.param == param


@pytest.mark.parametrize("kw", [
    {"response_format": {"type": "json_schema"}},
    {"response_format": {"type": "xml"}},
    {"tool_choice": "required"},
    {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}},
    {"tools": [WEATHER, WEATHER]},
    {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
    {"guided_choice": []},
])
def test_request_models_refuse(kw):
    with pytest.raises(ValidationError):
        chat(**kw)


def test_completions_refuse_tools_but_take_constraints():
    with pytest.raises(ValidationError):
        CompletionRequest(prompt="x", tools=[WEATHER])
    assert constraints.structured_spec(CompletionRequest(prompt="x", guided_regex="b")) == StructuredSpec("regex", "b")


@pytest.mark.parametrize("template, ok", [
    ("{% for m in messages %}{{ m.content }}{% endfor %}", False),
    ("{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}", True),
    ("{% set tools = [] %}{{ tools }}", False),  # assigned, never read from the caller
    ("{% if", False),
    (None, False),
])
def test_template_support_is_read_from_the_template(template, ok):
    assert tools.supports_tools(template) is ok


def test_parse_outputs():
    named = tools.parse(tools.ToolMode("named", "get_weather"), '{"city": "Paris"}')
    assert named[0] is None and named[1][0].function.name == "get_weather"
    assert named[1][0].function.arguments == '{"city": "Paris"}'
    content, calls = tools.parse(tools.ToolMode("required"), '[{"name": "a", "parameters": {"x": 1}}, '
                                                            '{"name": "b", "parameters": {}}]')
    assert content is None and [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("a", {"x": 1}), ("b", {})]
    assert tools.parse(tools.ToolMode("required"), '[{"name": "a", "para') == ('[{"name": "a", "para', [])
    auto = tools.ToolMode("auto")
    text = 'Let me look.\n<tool_call>\n{"name": "w", "arguments": {"c": "P"}}\n</tool_call><tool_call>{"name": "t", ' \
           '"parameters": {}}</tool_call>'
    content, calls = tools.parse(auto, text)
    assert content == "Let me look." and [(c.function.name, c.function.arguments) for c in calls] == [
        ("w", '{"c": "P"}'), ("t", "{}")]
    assert len({c.id for c in calls}) == 2
    assert tools.parse(auto, "no calls here") == ("no calls here", [])
    assert tools.parse(auto, "<tool_call>{broken</tool_call>") == ("<tool_call>{broken</tool_call>", [])


def _run(mode, pieces):
    s = tools.ToolStream(mode)
    out = [s.feed(p, i == len(pieces) - 1) for i, p in enumerate(pieces)]
    return "".join(c for c, _ in out), [d for _, ds in out for d in ds], s


def test_stream_auto_holds_back_only_what_may_start_a_call():
    s = tools.ToolStream(tools.ToolMode("auto"))
    assert s.feed("Hello <tool", False) == ("Hello ", [])  # "<tool" may begin "<tool_call>"
    assert s.feed("box> there", False) == ("<toolbox> there", [])
    content, deltas, _ = _run(tools.ToolMode("auto"), ["Sure. <tool_", 'call>{"name": "w", ', '"arguments": {}}',
                                                       "</tool_call>"])
    assert content == "Sure. " and [(d.index, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "w", "{}")]
    content, deltas, _ = _run(tools.ToolMode("auto"), ["plain ", "text <", "tool"])
    assert content == "plain text <tool" and deltas == []


def test_stream_named_sends_arguments_as_they_come_and_required_at_the_end():
    content, deltas, s = _run(tools.ToolMode("named", "f"), ['{"a"', ": 1}", ""])
    assert content == "" and deltas[0].id == s.calls[0].id and deltas[0].function.name == "f"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas) == '{"a": 1}'
    content, deltas, _ = _run(tools.ToolMode("required"), ['[{"name": "f", ', '"parameters": {"a": 1}}]'])
    assert content == "" and [(d.index, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "f", '{"a": 1}')]
