"""n > 1 and best_of through the official openai client against a real server: choices indexed as OpenAI does
(streamed one choice per chunk, a finish per index, usage once), seeds reproducible and distinct per choice,
greedy choices equal to n=1, a client gone mid-stream frees every block of every choice."""

import json

import httpx
import openai
import pytest

MODEL = "floodway/tiny-llama"
SAMPLED = dict(temperature=1.0, seed=11, extra_body={"ignore_eos": True})


@pytest.fixture(scope="module")
def client(engine_server):
    return openai.OpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _sse(raw) -> list[dict]:
    raw.http_response.read()
    return [json.loads(line[6:]) for line in raw.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_chat_n_choices_are_seeded_distinct_and_valid(client, validate_openai):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=10, n=3, **SAMPLED)
    raw = client.chat.completions.with_raw_response.create(**kw)
    validate_openai(json.loads(raw.text), "CreateChatCompletionResponse")
    a, b = raw.parse(), client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len({c.message.content for c in a.choices}) == 3
    assert a.usage.completion_tokens == 30 and a.usage.total_tokens == a.usage.prompt_tokens + 30


def test_completion_stream_indexes_choices_like_openai(client, validate_stream):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=8, n=3, **SAMPLED)
    whole = client.completions.create(**kw)
    raw = client.completions.with_raw_response.create(stream=True, stream_options={"include_usage": True}, **kw)
    chunks = _sse(raw)
    validate_stream(chunks, "CreateCompletionResponse")
    texts, finishes = {}, {}
    for c in chunks[:-1]:
        assert len(c["choices"]) == 1  # one choice per chunk, by index
        choice = c["choices"][0]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"]:
            finishes[choice["index"]] = finishes.get(choice["index"], 0) + 1
    assert finishes == {0: 1, 1: 1, 2: 1}
    assert [texts[i] for i in range(3)] == [c.text for c in whole.choices]  # the same seeds, streamed or not
    assert [c for c in chunks if c.get("usage")] == [chunks[-1]] and not chunks[-1]["choices"]
    assert chunks[-1]["usage"]["completion_tokens"] == 24


def test_greedy_chat_stream_choices_equal_n1(client, validate_stream):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0,
              extra_body={"ignore_eos": True})
    one = client.chat.completions.create(**kw).choices[0].message.content
    texts = {}
    chunks = [c.model_dump(exclude_unset=True) for c in client.chat.completions.create(stream=True, n=3, **kw)]
    validate_stream(chunks, "CreateChatCompletionStreamResponse")
    roles = [c["choices"][0]["index"] for c in chunks if c["choices"][0]["delta"].get("role")]
    assert sorted(roles) == [0, 1, 2]  # each choice opens with its role
    for c in chunks:
        choice = c["choices"][0]
        texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
    assert texts == {0: one, 1: one, 2: one}


def test_best_of_returns_n_and_counts_every_generated_token(client):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, n=1, best_of=3, logprobs=0, **SAMPLED)
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.usage.completion_tokens == 15  # three sequences computed, one returned
    # The returned one is the most likely of the three, which n=3 with the same seed generates too.
    three = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, n=3, logprobs=0, **SAMPLED)
    best = max(three.choices, key=lambda c: sum(c.logprobs.token_logprobs))
    assert r.choices[0].text == best.text


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "n": 2, "best_of": 1}, None),
    ({"prompt": "x", "best_of": 3, "stream": True}, None),
    ({"prompt": "x", "n": 9}, "n"),  # the server runs 8 sequences at once
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "n": 129}, "n"),
])
def test_bad_n_and_best_of_get_400(engine_server, body, param):
    r = httpx.post(engine_server.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    if param:
        assert r.json()["error"]["param"] == param


def test_client_gone_mid_stream_frees_every_choice_s_blocks(slow_server, wait_for, engine_debug):
    url = slow_server.url
    body = {"prompt": "A long story: " * 6, "max_tokens": 200, "n": 4, "stream": True, "ignore_eos": True}
    with httpx.Client(base_url=url, timeout=60) as c, c.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        seen = {json.loads(line[6:])["choices"][0]["index"] for line in
                (next(lines) for _ in range(24)) if line.startswith("data: {")}
        assert len(seen) == 4  # every choice streams
        assert engine_debug(url)["stats"]["num_running"] == 4
    stats = wait_for(lambda: (s := engine_debug(url))["inflight"] == 0
                     and s["stats"]["num_free_blocks"] == s["stats"]["num_total_blocks"] and s, 30,
                     "every block free after the client went away")
    assert stats["stats"]["num_running"] == 0 and stats["stats"]["num_waiting"] == 0


def test_client_gone_before_the_answer_frees_every_choice_s_blocks(slow_server, wait_for, engine_debug):
    url = slow_server.url
    body = {"prompt": "Tell me everything.", "max_tokens": 200, "n": 4, "ignore_eos": True}
    with httpx.Client(base_url=url) as c, pytest.raises(httpx.ReadTimeout):  # gives up long before the end
        c.post("/v1/completions", json=body, timeout=httpx.Timeout(30, read=0.5))
    stats = wait_for(lambda: (s := engine_debug(url))["inflight"] == 0
                     and s["stats"]["num_free_blocks"] == s["stats"]["num_total_blocks"] and s, 30,
                     "every block free after the client went away")
    assert stats["stats"]["num_running"] == 0 and stats["stats"]["num_waiting"] == 0
