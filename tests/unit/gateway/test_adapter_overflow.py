"""The overflow rule per model through the proxy (Gateway.handle) over real HTTP on 127.0.0.1: a request for an
adapter overflow.models maps goes to the overflow API under the mapped name; one for an adapter without an entry is
never sent there: served locally when an engine is ready, held while none is, and answered 429 with Retry-After
when the hold is full or its time is up. One stand-in server plays the local engine (/v1/...) and the overflow API
(/ext/v1/...) and records what each got."""

import json
import random

import aiohttp
from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.routing import RoutingWeights
from floodway.operator.gateway.upstream import UpstreamClient

from tests.unit.gateway.stand_in import completions_stand_in


def models(seen: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    return [(path, body["model"]) for path, body in seen]


async def _answers(url: str, ready: bool, models: list[str], **overflow) -> list[tuple[int, str | None]]:
    """(status, retry-after or backend header) per request for each model, one at a time, through a gateway whose
    only engine is `url` (ready and queued past the overflow threshold, or not ready)."""
    config = GatewayConfig.model_validate({
        "served_models": ["base", "support", "legal"], "backends": {"static": [url]},
        "overflow": {"enabled": True, "base_url": url + "/ext/v1", "model": "api-base",
                     "models": {"support": "api-support"}, "max_waiting_per_replica": 1, **overflow}})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([(url, url)])
    table.backends[url].ready, table.backends[url].waiting = ready, 5.0
    local = UpstreamClient(2.0, 10.0)
    out = []
    async with aiohttp.ClientSession() as remote:
        gateway = Gateway(config, table, GatewayMetrics(), local, remote)
        for model in models:
            answer = await gateway.handle("/v1/completions", json.dumps({"model": model, "prompt": "hi"}).encode(),
                                          {})
            headers = dict(answer.raw_headers)
            out.append((answer.status_code, headers.get(b"retry-after", headers.get(b"x-floodway-backend"))))
        assert gateway.held == 0
    local.close()
    return out


async def test_only_mapped_models_overflow_under_their_mapped_names():
    seen: list[tuple[str, dict]] = []
    runner, url = await completions_stand_in(seen)
    try:
        # No engine ready and no room to hold: the mapped ones overflow, the unmapped adapter gets 429 at once.
        got = await _answers(url, False, ["support", "base", "legal"], hold_queue_size=0)
        assert got[:2] == [(200, b"overflow"), (200, b"overflow")]
        assert got[2] == (429, b"1")
        assert models(seen) == [("/ext/v1/completions", "api-support"), ("/ext/v1/completions", "api-base")]
        # An engine ready but queued past the threshold: the mapped adapter overflows, the unmapped one stays local.
        seen.clear()
        got = await _answers(url, True, ["support", "legal"])
        assert got == [(200, b"overflow"), (200, url.encode())]
        assert models(seen) == [("/ext/v1/completions", "api-support"), ("/v1/completions", "legal")]
        # Held while no engine is ready, until its time is up: 429 with Retry-After, never the API.
        seen.clear()
        assert await _answers(url, False, ["legal"], hold_queue_size=4, hold_timeout_s=0.1) == [(429, b"1")]
        assert models(seen) == []
    finally:
        await runner.cleanup()
