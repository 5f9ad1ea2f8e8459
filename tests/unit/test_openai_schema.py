"""The spec validator itself: it accepts what OpenAI sends and rejects what issue 18 found in ours."""

import json

import pytest

CHAT = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                 "message": {"role": "assistant", "content": "hi", "refusal": None}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def chunk(delta, finish=None, index=0):
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}]}


def test_a_conforming_chat_response_passes(validate_openai):
    validate_openai(CHAT, "CreateChatCompletionResponse")


@pytest.mark.parametrize("breakage", [
    lambda b: b["choices"][0].update(finish_reason="abort"),
    lambda b: b["choices"][0]["message"].pop("refusal"),
    lambda b: b["choices"][0].update(logprobs={"content": []}),  # chat logprobs.refusal is required
])
def test_what_issue_18_found_fails(validate_openai, breakage):
    body = {**CHAT, "choices": [{**CHAT["choices"][0], "message": dict(CHAT["choices"][0]["message"])}]}
    breakage(body)
    with pytest.raises(AssertionError, match="not a valid"):
        validate_openai(body, "CreateChatCompletionResponse")


def test_stream_role_only_in_the_first_chunk_of_a_choice(validate_stream):
    good = [chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}), chunk({}, "length")]
    validate_stream(good, "CreateChatCompletionStreamResponse")
    for later in ({"role": None, "content": "a"}, {"role": "assistant", "content": "a"}):
        with pytest.raises(AssertionError, match="delta.role|delta/role"):
            validate_stream([good[0], chunk(later), good[2]], "CreateChatCompletionStreamResponse")
    with pytest.raises(AssertionError, match="never finished"):
        validate_stream(good[:2], "CreateChatCompletionStreamResponse")


def test_an_interrupted_stream_ends_with_an_error_event(validate_stream):
    error = {"error": {"message": "interrupted", "type": "server_error", "param": None, "code": None}}
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}), error]
    validate_stream(chunks, "CreateChatCompletionStreamResponse", error_ends=True)
    with pytest.raises(AssertionError, match="error event inside"):
        validate_stream(chunks, "CreateChatCompletionStreamResponse")


def test_completion_stream_chunks_and_the_usage_chunk(validate_stream):
    def piece(text, finish=None):
        return {"id": "c", "object": "text_completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}

    usage = {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    validate_stream([piece("a"), piece("b", "length"), usage], "CreateCompletionResponse")
    with pytest.raises(AssertionError, match="not a valid"):
        validate_stream([piece("a"), piece("b", "abort")], "CreateCompletionResponse")


def test_validate_reply_reads_a_whole_answer_as_a_client_got_it(validate_reply):
    url = "http://gw/v1/chat/completions"
    assert validate_reply(url, 200, json.dumps(CHAT)) == CHAT
    error = {"error": {"message": "busy", "type": "rate_limit_error", "param": None, "code": "capacity_exceeded"}}
    assert validate_reply(url, 429, json.dumps(error)) == error
    with pytest.raises(AssertionError, match="not a valid ErrorResponse"):
        validate_reply(url, 429, json.dumps({"detail": "busy"}))  # an error status must carry the spec's shape
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}), chunk({}, "length")]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    assert validate_reply(url, 200, sse + "data: [DONE]\n\n") == chunks
    cut = sse.rsplit("data: ", 1)[0] + f"data: {json.dumps(error)}\n\n"
    assert validate_reply(url, 200, cut)[-1] == error  # cut after bytes reached the client: an error event ends it
    with pytest.raises(AssertionError, match="neither"):
        validate_reply(url, 200, sse)  # ended without [DONE] or an error event
    with pytest.raises(AssertionError, match="never finished"):
        validate_reply(url, 200, sse.rsplit("data: ", 1)[0] + "data: [DONE]\n\n")
