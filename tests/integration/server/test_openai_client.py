"""The official openai client (sync and async, streaming and not, chat and completions) against a real server."""

import openai
import pytest

MODEL = "floodway/tiny-llama"


@pytest.fixture(scope="module")
def client(engine_server):
    return openai.OpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def aclient(engine_server):
    return openai.AsyncOpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_completion_greedy_is_deterministic_with_usage(client):
    kw = dict(model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text and a.choices[0].text
    assert a.choices[0].finish_reason == "length"
    assert a.usage.completion_tokens == 6 and a.usage.prompt_tokens > 0
    assert a.usage.total_tokens == a.usage.prompt_tokens + 6
    assert a.object == "text_completion" and a.id.startswith("cmpl-") and a.model == MODEL


def test_completion_token_ids_prompt_and_logprobs(client):
    r = client.completions.create(model=MODEL, prompt=[5, 6, 7, 8], max_tokens=3, temperature=0, logprobs=0,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert r.usage.prompt_tokens == 4
    assert len(lp.tokens) == len(lp.token_logprobs) == 3
    assert all(x <= 0 for x in lp.token_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


def test_completion_seed_reproduces_sampling(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=1.0, seed=1234,
              extra_body={"ignore_eos": True})
    assert client.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text


def test_completion_stop_string_ends_with_stop(client):
    free = client.completions.create(model=MODEL, prompt="a b c", max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = free.strip().split()[1] if len(free.split()) > 1 else free.strip()[:2]
    r = client.completions.create(model=MODEL, prompt="a b c", max_tokens=12, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text and free.startswith(r.choices[0].text)


def test_completion_stream_matches_non_stream_and_reports_usage(client):
    kw = dict(model=MODEL, prompt="Streaming test", max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                                                              {"role": "user", "content": "Hello!"}],
                                       max_completion_tokens=5, temperature=0, user="tester")
    msg = r.choices[0]
    assert msg.message.role == "assistant" and isinstance(msg.message.content, str)
    assert msg.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 5 and r.object == "chat.completion"


def test_chat_stream_role_first_then_content_then_done(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Count to three."}], max_tokens=6, temperature=0,
              extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == full
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 6


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                       temperature=0, logprobs=True, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 3 and all(t.logprob <= 0 for t in content)


async def test_async_client_concurrent_chat_and_completions(aclient):
    import asyncio

    async def chat(i):
        r = await aclient.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"n {i}"}],
                                                  max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
        return r.usage.completion_tokens

    async def stream(i):
        s = await aclient.completions.create(model=MODEL, prompt=f"prompt {i}", max_tokens=4, stream=True,
                                             temperature=0, extra_body={"ignore_eos": True})
        return "".join([c.choices[0].text async for c in s if c.choices])

    results = await asyncio.gather(*[chat(i) for i in range(3)], *[stream(i) for i in range(3)])
    assert results[:3] == [4, 4, 4]
    assert all(isinstance(t, str) and t for t in results[3:])


def test_errors_reach_the_client_as_typed_exceptions(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=10_000)
    assert e.value.body["code"] == "context_length_exceeded"


def test_usage_reports_prefix_cache_hits(client):
    prompt = "A unique shared system prompt for the prefix cache test, " * 4
    kw = dict(model=MODEL, prompt=prompt, max_tokens=1, temperature=0)
    first, second = client.completions.create(**kw), client.completions.create(**kw)
    assert first.usage.prompt_tokens >= 32
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens >= 16  # at least one full block was reused
