"""The lean engine client against scripted HTTP servers on 127.0.0.1: framing, streaming, reuse,
failures (refused, silent, cut, garbage, stale keep-alive), the pool limit."""

import asyncio
import time

import pytest
from floodway.operator import procs
from floodway.operator.gateway.upstream import UpstreamClient, UpstreamError, UpstreamTimeout

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (head and body by content-length); b"" when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


class Server:
    """Answers each connection with `script(reader, writer, n)` (n: the connection's index)."""

    def __init__(self, script):
        self.script, self.connections, self.requests = script, 0, []

    async def __aenter__(self):
        async def serve(reader, writer):
            self.connections += 1
            try:
                await self.script(self, reader, writer, self.connections)
            except asyncio.CancelledError:
                pass  # the test is over
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def next_request(self, reader) -> bytes:
        request = await read_request(reader)
        self.requests.append(request)
        return request


async def answer_each(server, reader, writer, n, answers=(OK,)):
    i = 0
    while await server.next_request(reader):
        writer.write(answers[i % len(answers)])
        i += 1


async def test_one_connection_serves_content_length_and_chunked_answers():
    async def script(server, reader, writer, n):
        await answer_each(server, reader, writer, n, (OK, CHUNKED_HEAD + chunk(b"data: x\n\n") + b"0\r\n\r\n"))

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5)
    async with Server(script) as server:
        first = await client.post(server.url + "/base/", "/v1/completions", b'{"q":1}')
        assert (first.status, first.content_type, await first.read()) == (200, "application/json", b'{"a":1}')
        first.close()
        second = await client.post(server.url + "/base/", "/v1/chat/completions", b"{}")
        assert (second.content_type, await second.read()) == ("text/event-stream", b"data: x\n\n")
        second.close()
    assert server.connections == 1
    host = server.url.removeprefix("http://").encode()
    assert server.requests[0] == (b"POST /base/v1/completions HTTP/1.1\r\nhost: " + host + b"\r\ncontent-type: "
                                  b"application/json\r\ncontent-length: 7\r\n\r\n{\"q\":1}")
    client.close()


async def test_chunks_are_read_as_they_arrive():
    release = asyncio.Event()

    async def script(server, reader, writer, n):
        await server.next_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await release.wait()  # the rest only once the client has read the first chunk
        writer.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")
        await server.next_request(reader)

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5)
    async with Server(script) as server:
        response = await client.post(server.url, "/v1/completions", b"{}")
        assert await response.readany() == b"data: 1\n\n"
        release.set()
        assert await response.readany() == b"data: 2\n\n"
        assert await response.readany() == b""
        response.close()


async def test_failures_raise_upstream_error():
    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=0.3)
    with pytest.raises(UpstreamError, match="cannot connect"):
        await client.post(f"http://127.0.0.1:{procs.free_port()}", "/v1/completions", b"{}")

    async def silent(server, reader, writer, n):
        await server.next_request(reader)
        await reader.read()  # never answers

    async with Server(silent) as server:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout, match="no data from the engine for 0.3 s"):  # slow: the proxy's 504
            await client.post(server.url, "/v1/completions", b"{}")
        assert time.monotonic() - started < 5

    async def cut(server, reader, writer, n):
        await server.next_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))  # then the connection closes mid-stream

    async with Server(cut) as server:
        response = await client.post(server.url, "/v1/completions", b"{}")
        assert await response.readany() == b"data: 1\n\n"  # what arrived is delivered first
        with pytest.raises(UpstreamError, match="closed the connection"):
            await response.readany()
        response.close()

    async def garbage(server, reader, writer, n):
        await server.next_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")
        await reader.read()

    async with Server(garbage) as server:
        with pytest.raises(UpstreamError, match="malformed response"):
            await client.post(server.url, "/v1/completions", b"{}")


async def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one():
    async def script(server, reader, writer, n):
        await server.next_request(reader)
        writer.write(OK)
        if n == 1:  # the engine drops the kept-alive connection just as the next request arrives
            await server.next_request(reader)
            return
        await answer_each(server, reader, writer, n)

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5)
    async with Server(script) as server:
        for _ in range(2):
            response = await client.post(server.url, "/v1/completions", b"{}")
            assert await response.read() == b'{"a":1}'
            response.close()
        assert server.connections == 2 and len(server.requests) == 3


async def test_a_silent_engine_on_a_reused_connection_is_not_retried():
    async def script(server, reader, writer, n):
        await server.next_request(reader)
        writer.write(OK)
        await server.next_request(reader)
        await reader.read()  # never answers the second request

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=0.3)
    async with Server(script) as server:
        response = await client.post(server.url, "/v1/completions", b"{}")
        await response.read()
        response.close()
        with pytest.raises(UpstreamError, match="no data"):
            await client.post(server.url, "/v1/completions", b"{}")
        assert server.connections == 1  # a timeout is the engine's answer, not a stale connection


async def test_connections_not_reused_after_close_unread_body_or_long_idle():
    closing = OK.replace(b"content-length", b"connection: close\r\ncontent-length")

    async def script(server, reader, writer, n):
        if n == 2:  # a stream the client leaves before its end
            await server.next_request(reader)
            writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
            await reader.read()
            return
        await answer_each(server, reader, writer, n, (closing,) if n == 1 else (OK,))

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5, max_idle_s=0.2)
    async with Server(script) as server:
        response = await client.post(server.url, "/v1/completions", b"{}")
        await response.read()
        response.close()  # the engine said connection: close
        response = await client.post(server.url, "/v1/completions", b"{}")
        assert await response.readany() == b"data: 1\n\n"
        response.close()  # the rest never read: the connection is dropped, which aborts the request there
        response = await client.post(server.url, "/v1/completions", b"{}")
        await response.read()
        response.close()
        assert server.connections == 3
        await asyncio.sleep(0.3)  # idle past max_idle_s (the condition under test, not synchronisation)
        response = await client.post(server.url, "/v1/completions", b"{}")
        await response.read()
        response.close()
        assert server.connections == 4


async def test_the_pool_limit_queues_requests_for_a_free_connection():
    async def script(server, reader, writer, n):
        await answer_each(server, reader, writer, n)

    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5, limit_per_engine=1)
    async with Server(script) as server:
        async def one():
            response = await client.post(server.url, "/v1/completions", b"{}")
            body = await response.read()
            response.close()
            return body

        assert await asyncio.gather(*(one() for _ in range(5))) == [b'{"a":1}'] * 5
        assert server.connections == 1


def test_bad_engine_url_is_a_clear_error():
    client = UpstreamClient(connect_timeout_s=5, read_timeout_s=5)
    with pytest.raises(ValueError, match="engine URL must be"):
        asyncio.run(client.post("ftp://x", "/v1/completions", b"{}"))
