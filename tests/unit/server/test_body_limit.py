import httpx
import pytest
from floodway.engine.server.body_limit import BodyLimit


async def echo_length(scope, receive, send):
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


@pytest.fixture
def client():
    app = BodyLimit(echo_length, max_bytes=1000)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_body_within_the_limit_reaches_the_app_whole(client):
    r = await client.post("/", content=b"x" * 1000)
    assert r.status_code == 200 and r.text == "1000"


async def test_declared_length_over_the_limit_gets_413_without_reading(client):
    r = await client.post("/", content=b"x" * 1001)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large" and "1000 bytes" in r.json()["error"]["message"]


async def test_chunked_body_over_the_limit_gets_413(client):
    async def chunks():
        for _ in range(5):
            yield b"x" * 300

    r = await client.post("/", content=chunks())
    assert r.status_code == 413
