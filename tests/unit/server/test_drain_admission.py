import time


def test_a_request_whose_prompt_was_encoding_when_the_drain_began_gets_503_not_a_cut_stream(monkeypatch):
    """SIGTERM can come while a request awaits its prompt's encoding, after the route's first draining check. The
    drain then sees nothing in flight and the server stops within seconds; had the request been admitted, its
    stream would have been cut mid-way (seen on a real pod: the gateway's "failed mid-stream"). It must get the
    draining 503 instead, before any byte, which the gateway retries on another engine."""
    from fastapi.testclient import TestClient
    from floodway.engine.config import EngineConfig
    from floodway.engine.server.app import create_app

    app = create_app(EngineConfig(model="floodway/tiny-llama"))
    state = app.state.server
    with TestClient(app) as client:
        deadline = time.monotonic() + 120
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, "the engine did not load"
            time.sleep(0.1)
        encode = state.encoder.completion_ids

        async def drain_begins_while_encoding(body):
            ids = await encode(body)
            state.draining = True  # what the drain sets on SIGTERM (drain.py)
            return ids

        monkeypatch.setattr(state.encoder, "completion_ids", drain_begins_while_encoding)
        r = client.post("/v1/completions", json={"prompt": "late", "max_tokens": 2, "stream": True})
        assert r.status_code == 503 and r.json()["error"]["code"] == "draining"
        assert state.frontend.inflight == 0  # nothing admitted for the stopping server to cut
