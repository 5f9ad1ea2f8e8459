"""Prompt tokenization off the event loop, with prompts that cannot fit refused before any tokenizer sees them.

A 4 MB prompt takes seconds to tokenize; on the event loop that stalls /health past a readiness probe's
timeout, so any client could knock a pod out of its Service. Here one thread owns a private tokenizer copy
(HF fast tokenizers must not be used from two threads at once) and does all the encoding and chat-template
rendering; the event loop only awaits it. Before that, a prompt longer in characters than the context can
hold (max_model_len tokens of at most `longest_token_chars` characters each) gets its 400 at once.
"""

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor

from floodway.engine.server import serving
from floodway.engine.server.errors import bad_request


def longest_token_chars(tokenizer) -> int:
    """The most prompt characters one token can stand for: its raw vocabulary string is at least as long as
    the text it encodes (byte-level BPE: one character per byte; SentencePiece: one per character)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return max(1, max(len(t or "") for t in tokens))


def check_prompt_chars(chars: int, max_chars: int, max_model_len: int, param: str) -> None:
    if chars > max_chars:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens; the {param} has {chars} characters, "
            f"more than that many tokens can hold ({max_chars}). Shorten the prompt.", param,
            code="context_length_exceeded")


class PromptEncoder:
    def __init__(self, tokenizer, max_model_len: int):
        self._tokenizer = copy.deepcopy(tokenizer)
        self.vocab_size = len(tokenizer)
        self.max_model_len = max_model_len
        self.max_chars = max_model_len * longest_token_chars(tokenizer)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def completion_ids(self, req) -> list[list[int]]:
        """Each prompt's ids (a completions request may carry several)."""
        prompts = req.prompts()
        for prompt in prompts:
            if isinstance(prompt, str):
                check_prompt_chars(len(prompt), self.max_chars, self.max_model_len, "prompt")
        return [await self._run(serving.completion_prompt_ids, p, self._tokenizer, self.vocab_size) for p in prompts]

    async def chat_ids(self, req) -> list[int]:
        chars = sum(len(m.text()) for m in req.messages)
        check_prompt_chars(chars, self.max_chars, self.max_model_len, "messages")
        return await self._run(serving.chat_prompt_ids, req, self._tokenizer)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
