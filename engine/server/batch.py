"""Several prompts in one completions request (the OpenAI API's `prompt: [...]`): one engine request per prompt,
their outputs merged into one stream whose choice indexes run prompt by prompt (prompt i's choice j is
i * n + j), so the response has one choice per prompt and n, in order, as OpenAI shapes it."""

import asyncio
import dataclasses
from collections.abc import AsyncIterator


class MergedOutputs:
    """Async iterator over several RequestStreams' outputs, in arrival order, re-indexed; closing it closes them
    all (each unfinished one is aborted in the engine). A failure of any one ends the iteration with it."""

    def __init__(self, streams: list, width: int):
        self._streams, self._width = streams, width
        self._queue: asyncio.Queue = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._pump(i, s)) for i, s in enumerate(streams)]
        self._live = len(streams)

    async def _pump(self, i: int, stream) -> None:
        try:
            async for out in stream:
                await self._queue.put(dataclasses.replace(out, index=i * self._width + out.index))
        except Exception as e:  # noqa: BLE001 - handed to the reader, which reports it
            await self._queue.put(e)
        await self._queue.put(None)

    def __aiter__(self) -> AsyncIterator:
        return self

    async def __anext__(self):
        while self._live:
            item = await self._queue.get()
            if item is None:
                self._live -= 1
                continue
            if isinstance(item, Exception):
                self.close()
                raise item
            return item
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for stream in self._streams:
            stream.close()
        self._live = 0
