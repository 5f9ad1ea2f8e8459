"""A streamed answer's time per output token as the gateway sees it: the mean gap between the server-sent events
that carry its choices, from the first to the last. An OpenAI-compatible engine sends one event per step that
gives a request new tokens, so the gap is the client's time per step: its TPOT, or, where a step gives several
tokens (speculative decoding), the time per burst, which is what a reader waits. No token counts are needed, so it
holds for any runtime and for the overflow API. Only a stream that ended whole is measured."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

_EVENT, _DONE, _ERROR = b"data: ", b"data: [DONE]", b'data: {"error"'


def choice_events(chunk: bytes) -> int:
    """Events in this chunk of the stream that carry choices: each `data: ` line but `[DONE]` and an error."""
    return chunk.count(_EVENT) - chunk.count(_DONE) - chunk.count(_ERROR)


def mean_gap_s(first_s: float, last_s: float, events: int) -> float | None:
    """The mean time between `events` events, the first at first_s and the last at last_s; None for fewer than 2."""
    return (last_s - first_s) / (events - 1) if events > 1 else None


async def timed(chunks: AsyncIterator[bytes], clock: Callable[[], float],
                on_end: Callable[[float], None]) -> AsyncIterator[bytes]:
    """Passes the stream's chunks on, timing each as it arrives; once it ended whole (no error event, the client
    still there) with two events or more, calls on_end(mean gap in seconds)."""
    first = last = None
    events, failed = 0, False
    async for chunk in chunks:
        now, n = clock(), choice_events(chunk)
        failed = failed or _ERROR in chunk
        if n:
            first = now if first is None else first
            last, events = now, events + n
        yield chunk
    gap = None if failed or first is None else mean_gap_s(first, last, events)
    if gap is not None:
        on_end(gap)
