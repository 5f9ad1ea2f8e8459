"""MergedOutputs: several prompts' output streams as one, choice indexes prompt by prompt."""

import asyncio
from dataclasses import dataclass

import pytest
from floodway.engine.server.batch import MergedOutputs


@dataclass
class Out:
    request_id: str
    index: int


class FakeStream:
    """Stand-in for a RequestStream: yields its items (an Exception is raised), records close()."""

    def __init__(self, items):
        self.items, self.closed = list(items), False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.sleep(0)
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self):
        self.closed = True


async def drain(merged):
    return [(o.request_id, o.index) async for o in merged]


async def merge(streams, width):
    return await drain(MergedOutputs(streams, width))  # built on the running loop, as in the server


def test_outputs_are_reindexed_prompt_by_prompt():
    streams = [FakeStream([Out("a", 0), Out("a", 1), Out("a", 0)]), FakeStream([Out("b", 1), Out("b", 0)])]
    got = asyncio.run(merge(streams, 2))
    assert sorted(got) == [("a", 0), ("a", 0), ("a", 1), ("b", 2), ("b", 3)]


def test_a_failure_ends_the_merge_and_closes_every_stream():
    async def run():
        streams = [FakeStream([Out("a", 0)] * 50), FakeStream([ValueError("boom")])]
        merged = MergedOutputs(streams, width=1)
        with pytest.raises(ValueError, match="boom"):
            await drain(merged)
        return streams

    assert all(s.closed for s in asyncio.run(run()))
