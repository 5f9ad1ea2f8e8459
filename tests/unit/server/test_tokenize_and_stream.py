"""Prompt encoding happens in the encoder's own thread and refuses prompts too long in characters before any
tokenizer runs; the chat stream holds its role chunk until the first token (a scripted tokenizer and output
queue stand in for the engine; the real ones are exercised by the integration tests)."""

import asyncio
import json
import threading

import pytest
from floodway.engine.outputs import RequestMetrics, RequestOutput
from floodway.engine.server import serving
from floodway.engine.server.errors import APIError
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from floodway.engine.server.tokenize import PromptEncoder


class RecordingTokenizer:
    """One character per token, longest vocabulary entry 3 characters; records the threads that used it."""

    def __init__(self):
        self.threads: list[str] = []

    def __len__(self):
        return 100

    def convert_ids_to_tokens(self, ids):
        return ["abc" if i == 7 else "a" for i in ids]

    def encode(self, text, add_special_tokens=True):
        self.threads.append(threading.current_thread().name)
        return [ord(c) % 100 for c in text]

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.threads.append(threading.current_thread().name)
        return "".join(m["content"] for m in messages)


def _encoder(max_model_len=10):
    encoder = PromptEncoder(RecordingTokenizer(), max_model_len)
    return encoder, encoder._tokenizer  # the encoder works on its own copy


def test_prompts_are_encoded_in_the_encoder_thread_never_the_event_loop():
    encoder, tok = _encoder()

    async def run():
        ids = await encoder.completion_ids(CompletionRequest(prompt="hello"))
        chat = await encoder.chat_ids(ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}]))
        return ids, chat, threading.current_thread().name

    try:
        ids, chat, loop_thread = asyncio.run(run())
    finally:
        encoder.close()
    assert [len(p) for p in ids] == [5] and len(chat) == 2
    assert tok.threads and all(t.startswith("tokenizer") and t != loop_thread for t in tok.threads)


@pytest.mark.parametrize("request_,param", [
    (CompletionRequest(prompt="x" * 31), "prompt"),
    (ChatCompletionRequest(messages=[{"role": "user", "content": "x" * 20}, {"role": "user", "content": "y" * 11}]),
     "messages"),
])
def test_a_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing(request_, param):
    encoder, tok = _encoder(max_model_len=10)  # 10 tokens of at most 3 characters: 30 characters fit
    encode = encoder.completion_ids if param == "prompt" else encoder.chat_ids
    try:
        with pytest.raises(APIError) as e:
            asyncio.run(encode(request_))
    finally:
        encoder.close()
    assert e.value.status == 400 and e.value.param == param and e.value.code == "context_length_exceeded"
    assert "31 characters" in e.value.message and tok.threads == []


def _output(text: str, finished: bool) -> RequestOutput:
    return RequestOutput("r", [1], [5], [5], text, text, finished, "length" if finished else None, None, None, 0,
                         RequestMetrics(0.0))


def test_chat_stream_sends_nothing_before_the_first_token():
    async def run():
        queue: asyncio.Queue = asyncio.Queue()

        async def outputs():
            while (item := await queue.get()) is not None:
                yield item

        stream = serving.chat_stream(outputs(), "r", "m", 0, None, False, False)
        first = asyncio.ensure_future(anext(stream))
        for _ in range(20):  # let the stream run as far as it can without an output
            await asyncio.sleep(0)
        held = not first.done()
        queue.put_nowait(_output("Hi", True))
        queue.put_nowait(None)
        chunk = await first
        rest = [c async for c in stream]
        return held, chunk, rest

    held, chunk, rest = asyncio.run(run())
    assert held, "the role chunk went out before any token existed"
    events = [json.loads(line[6:]) for line in chunk.splitlines() if line.startswith("data: ")]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"  # the role chunk still comes first
    assert events[1]["choices"][0]["delta"]["content"] == "Hi"
    assert rest == [serving.DONE]
