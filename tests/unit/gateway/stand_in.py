"""Stand-ins on 127.0.0.1 for the gateway's unit tests: `serve` runs any aiohttp app on a free port, and
`completions_stand_in` plays both an engine (/v1/completions) and the overflow API (/ext/v1/completions) for tests that
drive Gateway.handle in process: it answers every completion with "ok" and records (path, request body) of each."""

from aiohttp import web


async def completions_stand_in(seen: list[tuple[str, dict]]) -> tuple[web.AppRunner, str]:
    """(its runner, to clean up; its URL)."""
    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.path, body))
        return web.json_response({"id": "c", "object": "text_completion", "created": 0, "model": body.get("model"),
                                  "choices": [{"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}]})
    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/ext/v1/completions", complete)
    return await serve(app)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Runs app on a free port of 127.0.0.1: (its runner, to clean up; its URL)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
