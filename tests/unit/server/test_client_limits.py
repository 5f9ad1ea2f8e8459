"""A client connection's limits on a real uvicorn server (the protocol the engine and the gateway run): a head that
never ends gets 431 and a closed connection instead of growing the server, a connection that sends no complete
head in time is closed and one whose body stalls gets 408, instead of being held forever, while heads under the
limit and large bodies on a kept-alive connection are untouched."""

import asyncio
import json

import pytest
import uvicorn
from floodway.engine.server.client_limits import HEAD_TIMEOUT_S, MAX_HEAD_BYTES, ClientLimits
from floodway.operator import procs


async def echo_length(scope, receive, send):
    size, more = 0, True
    while more:
        message = await receive()
        size, more = size + len(message.get("body", b"")), message.get("more_body", False)
    body = str(size).encode()
    length = str(len(body)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def server(request):
    """The port of a uvicorn server running ClientLimits; `@pytest.mark.parametrize("server", [seconds],
    indirect=True)` shortens its head and body timeouts."""
    timeout_s = getattr(request, "param", HEAD_TIMEOUT_S)
    protocol = type("Limits", (ClientLimits,), {"head_timeout_s": timeout_s, "body_idle_timeout_s": timeout_s})
    port = procs.free_port()
    srv = uvicorn.Server(uvicorn.Config(echo_length, host="127.0.0.1", port=port, http=protocol, loop="asyncio",
                                        log_level="warning", lifespan="off"))
    task = asyncio.create_task(srv.serve())
    for _ in range(500):  # started within 10 s
        if srv.started:
            break
        await asyncio.sleep(0.02)
    assert srv.started
    yield port
    srv.should_exit = True
    await task


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    return int(lines[0].split()[1]), headers, body


async def test_a_head_that_never_ends_gets_431_and_the_connection_closes(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    answer = asyncio.create_task(reader.read(100))
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\nx-endless: ")
    sent = 0
    try:
        while not answer.done() and sent < 64 * MAX_HEAD_BYTES:  # the header never ends; 4 MB as the bound
            writer.write(b"a" * 8192)
            await writer.drain()
            sent += 8192
            await asyncio.sleep(0.001)  # lets the answer in
    except ConnectionError:
        pass  # closed by the server while we wrote
    assert (await asyncio.wait_for(answer, 10)).startswith(b"HTTP/1.1 431 ")
    assert sent < 4 * MAX_HEAD_BYTES  # stopped at the limit, not at what the client chose to send
    writer.close()


async def test_the_431_names_the_limit(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * MAX_HEAD_BYTES)  # still unfinished
    status, headers, body = await read_answer(reader)
    assert status == 431 and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "header_too_large" and str(MAX_HEAD_BYTES) in error["message"]
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
    writer.close()


async def test_heads_under_the_limit_and_big_bodies_on_a_kept_alive_connection_pass(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    big_head = b"POST / HTTP/1.1\r\nhost: t\r\n" + b"".join(b"x-h%d: %s\r\n" % (i, b"a" * 1000) for i in range(60))
    writer.write(big_head + b"content-length: 2\r\n\r\nhi")
    assert (await read_answer(reader))[::2] == (200, b"2")
    for size in (4 * 2**20, 3):  # a body is no head, however large; the head after it starts from zero
        writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % size + b"x" * size)
        assert (await read_answer(reader))[::2] == (200, str(size).encode())
    writer.close()


@pytest.mark.parametrize("server", [1.0], indirect=True)
async def test_connections_without_a_complete_head_in_time_are_closed(server):
    silent = await asyncio.open_connection("127.0.0.1", server)
    trickling = await asyncio.open_connection("127.0.0.1", server)
    trickling[1].write(b"POST / HTTP/1.1\r\nhost: t\r\n")  # and no more
    for reader, writer in (silent, trickling):
        assert await asyncio.wait_for(reader.read(), 30) == b""  # closed by the server, not by the deadline here
        writer.close()


@pytest.mark.parametrize("server", [1.0], indirect=True)
async def test_a_stalled_body_gets_408(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n" + b"x" * 10)  # 90 never come
    status, headers, body = await read_answer(reader)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()
