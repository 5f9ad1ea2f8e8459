"""A closed-loop chat load against any OpenAI-compatible server: `concurrency` clients, each sending its next
streamed chat request when the previous one ends, every request asking for exactly `max_tokens` tokens.

Each request's user message starts with its own number, so only the chat template's system prompt is a prefix two
requests share (a server's prefix cache cannot answer a whole prompt).
"""

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from floodway.operator.stats import quantile

QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain gravity to a child.",
    "List three fruits and say why each is healthy.", "What is 12 times 12?", "Give me a tip for learning to cook.",
    "Why is the sky blue?", "Translate 'good morning' into Spanish, French and German.",
    "Write a short poem about autumn leaves.", "What are the primary colours?",
    "Describe a quiet morning in a small mountain village, with the bakery opening and the first bus arriving.",
    "Summarise the plot of a story where a girl finds a lost dog and walks it home across the city in the rain.",
]


def chat_messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Request {i}. {QUESTIONS[i % len(QUESTIONS)]}"}]


@dataclass
class LoadResult:
    tokens: int = 0
    seconds: float = 0.0
    ttfts: list[float] = field(default_factory=list)  # seconds from sending to the first content token
    itls: list[float] = field(default_factory=list)  # seconds between a request's consecutive content chunks
    short: int = 0  # requests that returned fewer tokens than asked
    cpu_seconds: float | None = None  # the server process's, when its pid is known
    # Its busiest thread's (the engine's step loop) and the sum of all its others' (HTTP, streaming), on Linux.
    thread_cpu_seconds: tuple[float, float] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def cpu_ms_per_token(self) -> tuple[float, float] | None:
        """(busiest thread, all other threads) CPU ms per output token, when both were measured (pure)."""
        if self.thread_cpu_seconds is None or not self.tokens:
            return None
        busiest, others = self.thread_cpu_seconds
        return 1000 * busiest / self.tokens, 1000 * others / self.tokens

    def ttft_ms(self, q: float) -> float:
        """The q-quantile of TTFT in ms (pure)."""
        return 1000 * quantile(self.ttfts, q)

    def itl_ms(self, q: float) -> float:
        """The q-quantile of inter-token latency in ms (pure)."""
        return 1000 * quantile(self.itls, q)


def parse_sse(line: bytes) -> dict | None:
    """The JSON of one `data:` line of a stream; None for other lines and the final `[DONE]` (pure)."""
    text = line.decode().strip()
    if not text.startswith("data:") or text == "data: [DONE]":
        return None
    return json.loads(text[5:])


def chunk_tokens(chunk: dict) -> tuple[bool, int | None]:
    """(whether the chunk carries generated text, its usage's completion_tokens if any) (pure)."""
    usage = chunk.get("usage") or {}
    text = any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or [])
    return text, usage.get("completion_tokens")


async def _request(session, url: str, model: str, i: int, max_tokens: int, messages: Callable[[int], list[dict]],
                   ignore_eos: bool, temperature: float) -> tuple[float, int, list[float]]:
    """(TTFT, tokens, the gaps between content chunks) of one streamed request."""
    body = {"model": model, "messages": messages(i), "max_tokens": max_tokens, "temperature": temperature,
            "ignore_eos": ignore_eos, "stream": True, "stream_options": {"include_usage": True}}
    sent, first, chunks, usage, arrivals = time.perf_counter(), None, 0, None, []
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.content:
            chunk = parse_sse(line)
            if chunk is None:
                continue
            text, n = chunk_tokens(chunk)
            if text:
                arrivals.append(time.perf_counter())
                first = first or arrivals[-1]
                chunks += 1
            usage = n if n is not None else usage
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return (first or time.perf_counter()) - sent, usage if usage is not None else chunks, gaps


async def closed_loop(url: str, model: str, concurrency: int, num_requests: int, max_tokens: int,
                      first_id: int = 0, messages: Callable[[int], list[dict]] = chat_messages,
                      ignore_eos: bool = True, temperature: float = 0.0) -> LoadResult:
    import aiohttp

    result, queue = LoadResult(), iter(range(first_id, first_id + num_requests))

    async def client(session):
        for i in queue:  # one shared iterator: each request id is taken once
            ttft, tokens, gaps = await _request(session, url, model, i, max_tokens, messages, ignore_eos, temperature)
            result.ttfts.append(ttft)
            result.itls.extend(gaps)
            result.tokens += tokens
            result.short += tokens < max_tokens

    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    # A connection per request: llama-server drops a kept-alive connection after a stream.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        result.seconds = time.perf_counter() - start
    return result
