"""Every body and stream chunk the engine sends, validated against the official OpenAI OpenAPI spec's component
schemas (the vendored subset, tests/openai_schema.py): completions and chat, streamed or not, with usage and
logprobs, the model list and retrieve, and errors."""

import json

import httpx
import openai
import pytest

MODEL = "floodway/tiny-llama"
CHAT = [{"role": "user", "content": "Say something."}]


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def stream(url: str, path: str, body: dict) -> list[dict]:
    """The stream's parsed chunks; asserts SSE framing and the closing [DONE]."""
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    return [json.loads(e[6:]) for e in events[:-1]]


@pytest.mark.parametrize("extra", [{}, {"logprobs": 0}, {"prompt": [5, 6, 7]}, {"stop": ["e"], "max_tokens": 24}])
def test_completions(engine_server, validate_openai, validate_stream, extra):
    body = {"model": MODEL, "prompt": "Once upon", "max_tokens": 5, "temperature": 0, **extra}
    r = post(engine_server.url, "/v1/completions", body)
    assert r.status_code == 200
    validate_openai(r.json(), "CreateCompletionResponse")
    chunks = stream(engine_server.url, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    validate_stream(chunks, "CreateCompletionResponse")
    assert chunks[-1]["usage"]["completion_tokens"] == r.json()["usage"]["completion_tokens"]


@pytest.mark.parametrize("extra", [{}, {"logprobs": True}, {"logprobs": True, "top_logprobs": 0}])
def test_chat(engine_server, validate_openai, validate_stream, extra):
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 5, "temperature": 0, **extra}
    r = post(engine_server.url, "/v1/chat/completions", body)
    assert r.status_code == 200
    validate_openai(r.json(), "CreateChatCompletionResponse")
    message = r.json()["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None
    for include_usage in (False, True):
        chunks = stream(engine_server.url, "/v1/chat/completions",
                        {**body, "stream_options": {"include_usage": include_usage}})
        validate_stream(chunks, "CreateChatCompletionStreamResponse")  # role in the first chunk only
        assert ("usage" in chunks[-1] and not chunks[-1]["choices"]) == include_usage
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == \
            message["content"]


def test_chat_logprobs_leave_out_the_end_of_turn_token(engine_server, tiny_model_path, validate_openai,
                                                        validate_stream):
    """A stop token ends the turn without being part of `content`, so its logprob is not listed either. Every id
    is a stop token here (standing in for the model's end-of-turn token, which the tiny random model rarely
    samples): the first token ends the turn, counted in usage, absent from content and from logprobs."""
    with open(f"{tiny_model_path}/config.json") as f:
        vocab = json.load(f)["vocab_size"]
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 5, "logprobs": True, "stop_token_ids": list(range(vocab))}
    r = post(engine_server.url, "/v1/chat/completions", body).json()
    validate_openai(r, "CreateChatCompletionResponse")
    choice = r["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"], r["usage"]["completion_tokens"]) == ("stop", "", 1)
    assert choice["logprobs"] == {"content": [], "refusal": None}
    chunks = stream(engine_server.url, "/v1/chat/completions", body)
    validate_stream(chunks, "CreateChatCompletionStreamResponse")
    assert [t for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["content"]] == []


def test_models_list_and_retrieve(engine_server, validate_openai):
    url = engine_server.url
    listed = httpx.get(url + "/v1/models").json()
    validate_openai(listed, "ListModelsResponse")
    card = httpx.get(f"{url}/v1/models/{MODEL}")
    assert card.status_code == 200 and card.json()["id"] == MODEL
    validate_openai(card.json(), "Model")
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    assert client.models.retrieve(MODEL).id == MODEL
    missing = httpx.get(url + "/v1/models/no-such-model")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    validate_openai(missing.json(), "ErrorResponse")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


@pytest.mark.parametrize("path,body,status", [
    ("/v1/completions", {"prompt": "x", "temperature": 9}, 400),
    ("/v1/completions", "{not json", 400),
    ("/v1/chat/completions", {"messages": []}, 400),
    ("/v1/chat/completions", {"model": "other", "messages": CHAT}, 404),
    ("/v1/completions", {"prompt": "x " * 400, "max_tokens": 5}, 400),  # past the context
])
def test_errors(engine_server, validate_openai, path, body, status):
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(engine_server.url + path, content=content, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == status
    validate_openai(r.json(), "ErrorResponse")


def test_several_prompts_one_choice_per_prompt_and_n_in_order(engine_server, validate_openai, validate_stream):
    url, prompts = engine_server.url, ["Once upon", "The river", "A cat sat"]
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    alone = [post(url, "/v1/completions", {**body, "prompt": p}).json() for p in prompts]
    r = post(url, "/v1/completions", {**body, "prompt": prompts, "n": 2})
    assert r.status_code == 200, r.text
    validate_openai(r.json(), "CreateCompletionResponse")
    texts = [c["text"] for c in r.json()["choices"]]
    assert [c["index"] for c in r.json()["choices"]] == list(range(6))
    assert texts == [a["choices"][0]["text"] for a in alone for _ in range(2)]  # greedy: n copies, prompt order
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
    assert usage["completion_tokens"] == 6 * 4
    chunks = stream(url, "/v1/completions", {**body, "prompt": prompts, "n": 2,
                                             "stream_options": {"include_usage": True}})
    validate_stream(chunks, "CreateCompletionResponse")
    streamed = {}
    for c in chunks:
        for choice in c["choices"]:
            streamed[choice["index"]] = streamed.get(choice["index"], "") + choice["text"]
    assert [streamed[i] for i in range(6)] == texts and chunks[-1]["usage"] == usage
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    sdk = client.completions.create(model=MODEL, prompt=["Once upon", "The river"], max_tokens=4, temperature=0,
                                    extra_body={"ignore_eos": True})
    assert [c.text for c in sdk.choices] == [texts[0], texts[2]]


def test_max_tokens_0_with_echo_returns_each_prompt(engine_server, validate_openai):
    url, prompts = engine_server.url, ["Once upon a time", "The river"]
    body = {"model": MODEL, "prompt": prompts, "max_tokens": 0, "echo": True}
    r = post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    validate_openai(r.json(), "CreateCompletionResponse")
    assert [c["text"] for c in r.json()["choices"]] == prompts
    assert r.json()["usage"]["completion_tokens"] == 0
    with_logprobs = post(url, "/v1/completions", {**body, "logprobs": 1}).json()
    validate_openai(with_logprobs, "CreateCompletionResponse")
    for choice, prompt in zip(with_logprobs["choices"], prompts, strict=True):
        lp = choice["logprobs"]
        assert "".join(lp["tokens"]).endswith(prompt) and lp["token_logprobs"][0] is None
        assert all(x <= 0 for x in lp["token_logprobs"][1:])
    refused = post(url, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0})
    assert refused.status_code == 400 and "echo" in refused.json()["error"]["message"]
    validate_openai(refused.json(), "ErrorResponse")
