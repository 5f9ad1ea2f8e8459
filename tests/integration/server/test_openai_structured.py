"""Structured output and tools through the official openai client against a real engine serving the trained
SmolLM2-135M-Instruct: every output parses and validates against its schema (greedy and sampled, chat and
completions, streamed or not), every body and chunk against the OpenAI spec; bad schemas get a 400.

SmolLM2's own chat template never reads `tools`, so the tool tests serve the same weights from a model folder
whose template does (Hermes-style, as Qwen2.5's): a user's way to serve a model with a template of their own.
The tiny model's template has no tool support: tools get a 400 there.
"""

import json
import os

import jsonschema
import openai
import pytest

MODEL = "smollm2-tools"
# A ChatML template like SmolLM2's that shows the model its tools and its earlier calls (a test fixture).
TOOL_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'You are a helpful assistant.' }}
You can call these functions:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call one, reply with <tool_call>{"name": <function name>, "arguments": <arguments object>}</tool_call><|im_end|>
{% elif messages[0]['role'] != 'system' %}<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
{% endif %}
{%- for m in messages %}{% if not (tools and loop.first and m['role'] == 'system') %}<|im_start|>{{ m['role'] }}
{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<tool_call>{"name": "{{ c['function']['name'] }}", \
"arguments": {{ c['function']['arguments'] | tojson }}}</tool_call>{% endfor %}{% else %}{{ m['content'] }}{% endif %}\
<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"], "additionalProperties": False}
CITY = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Rome", "Berlin"]}, "capital": {"type": "boolean"},
    "rivers": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3}},
    "required": ["city", "capital", "rivers"], "additionalProperties": False}
NUMBERS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100}, "minItems": 2, "maxItems": 5}
SCHEMAS = [("Describe a person as JSON.", PERSON), ("Give facts about the capital of France as JSON.", CITY),
           ("List a few numbers as JSON.", NUMBERS)]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}},
                       "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tools_engine(start_engine, tmp_path_factory):
    """SmolLM2's weights, tokenizer and config, with the tool-aware template above."""
    from floodway.engine.models.builtin import resolve_model

    src = resolve_model("floodway/smollm2-135m-instruct")
    folder = tmp_path_factory.mktemp("smollm2-tools")
    for name in os.listdir(src):
        if name != "chat_template.jinja":
            os.symlink(os.path.join(src, name), folder / name)
    (folder / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    return start_engine("--model", str(folder), "--served-model-name", MODEL, "--max-model-len", "1024",
                        "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def client(tools_engine):
    return openai.OpenAI(base_url=tools_engine.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _response_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


def _stream(client, validate_stream, component: str, create, **kw) -> list[dict]:
    chunks = [c.model_dump(exclude_unset=True) for c in create(**kw, stream=True)]
    validate_stream(chunks, component)
    return chunks


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("question, schema", SCHEMAS, ids=["person", "city", "numbers"])
def test_chat_json_schema(client, validate_openai, validate_stream, question, schema, sampled):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=80,
              response_format=_response_format(schema), temperature=0.8 if sampled else 0, seed=7)
    r = client.chat.completions.create(**kw)
    validate_openai(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    chunks = _stream(client, validate_stream, "CreateChatCompletionStreamResponse", client.chat.completions.create,
                     **kw)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == r.choices[0].message.content  # same seed, same answer


def test_chat_json_object_and_n_choices(client, validate_openai):
    """Any JSON object, three sampled choices (each its own grammar state, forked off one prompt)."""
    ask = "Reply with a JSON object whose only key is name, naming a cat."
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ask}],
                                       response_format={"type": "json_object"}, max_tokens=60, temperature=0.7,
                                       seed=3, n=3)
    validate_openai(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")
    assert [c.index for c in r.choices] == [0, 1, 2]
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice.message.content
        assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize("extra, check", [
    ({"guided_json": PERSON}, lambda t: jsonschema.validate(json.loads(t), PERSON) is None),
    ({"response_format": _response_format(NUMBERS)}, lambda t: jsonschema.validate(json.loads(t), NUMBERS) is None),
    ({"guided_regex": r"[0-9]{3}-[0-9]{4}"}, lambda t: __import__("re").fullmatch(r"[0-9]{3}-[0-9]{4}", t)),
    ({"guided_choice": ["Paris", "London", "Rome"]}, lambda t: t in ("Paris", "London", "Rome")),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
], ids=["guided_json", "response_format", "guided_regex", "guided_choice", "structured_outputs"])
def test_completions(client, validate_openai, validate_stream, extra, check):
    kw = dict(model=MODEL, prompt="The capital of France is", max_tokens=60, temperature=0, extra_body=extra)
    r = client.completions.create(**kw)
    validate_openai(r.model_dump(exclude_unset=True), "CreateCompletionResponse")
    assert r.choices[0].finish_reason == "stop" and check(r.choices[0].text), r.choices[0].text
    chunks = _stream(client, validate_stream, "CreateCompletionResponse", client.completions.create, **kw)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == r.choices[0].text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("extra, param", [
    ({"response_format": _response_format({"type": "frobnicate"})}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"guided_regex": "(unclosed"}, "guided_regex"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_regex"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
], ids=["unknown-type", "no-schema", "bad-regex", "bad-json", "two-constraints", "two-in-structured-outputs"])
def test_bad_constraints_are_400(client, extra, param, stream):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, stream=stream, extra_body=extra)
    assert e.value.status_code == 400
    assert param in (e.value.body.get("param") or "") + e.value.body.get("message", ""), e.value.body


def _assert_call(call, tool: dict) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == tool["function"]["name"]
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


@pytest.mark.parametrize("choice, tool", [
    ({"type": "function", "function": {"name": "get_weather"}}, WEATHER),
    ({"type": "function", "function": {"name": "get_time"}}, TIME),
    ("required", None),
], ids=["named-weather", "named-time", "required"])
def test_forced_tool_calls(client, validate_openai, validate_stream, choice, tool):
    kw = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=120, temperature=0)
    r = client.chat.completions.create(**kw)
    validate_openai(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.content is None and msg.tool_calls
    by_name = {t["function"]["name"]: t for t in TOOLS}
    for call in msg.tool_calls:
        _assert_call(call, tool or by_name[call.function.name])
    # Streamed: OpenAI's delta shape (index, then id/type/name once, arguments in pieces), the same calls.
    chunks = _stream(client, validate_stream, "CreateChatCompletionStreamResponse", client.chat.completions.create,
                     **kw)
    deltas = [d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls") or []]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    calls: dict[int, dict] = {}
    for d in deltas:
        call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
        if "id" in d:
            assert "id" not in call and d["type"] == "function"
            call["id"] = d["id"]
        call["name"] += d.get("function", {}).get("name", "")
        call["arguments"] += d.get("function", {}).get("arguments", "")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls]


def test_auto_and_none_and_a_tool_conversation(client, validate_openai):
    """auto: content or calls the model chose (each call valid if any); none: content only; a conversation with
    an earlier call and its result renders and answers."""
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0)
    validate_openai(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")
    by_name = {t["function"]["name"]: t for t in TOOLS}
    for call in r.choices[0].message.tool_calls or []:
        _assert_call(call, by_name[call.function.name])
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=20,
                                       temperature=0)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none",
                                       max_tokens=20, temperature=0)
    validate_openai(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")
    assert r.choices[0].message.content


@pytest.mark.parametrize("extra, match", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
    ({"tools": [WEATHER, WEATHER]}, "unique"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice needs tools"),
])
def test_bad_tool_requests_are_400(client, extra, match):
    kw = dict(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=5) | extra
    if kw["tools"] is None:
        del kw["tools"]
    with pytest.raises(openai.BadRequestError, match=match):
        client.chat.completions.create(**kw)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", [None, "auto", "required"])
def test_tools_on_a_template_without_them_are_400(engine_server, stream, choice):
    """The tiny model's template never reads `tools`: a 400 that says so, streamed or not."""
    c = openai.OpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    kw = {"tool_choice": choice} if choice else {}
    with pytest.raises(openai.BadRequestError, match="chat template has no tool support") as e:
        c.chat.completions.create(model="floodway/tiny-llama", messages=ASK, tools=TOOLS, stream=stream,
                                  max_tokens=5, **kw)
    assert e.value.body["param"] == "tools" and e.value.body["code"] == "tools_not_supported"
