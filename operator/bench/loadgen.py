"""An open-loop load generator: request i starts at t0 + i / rate whatever the latency of earlier ones.
Used by `floodway bench gateway` and the gateway's integration tests. It sends with aiohttp: its CPU cost
per request is a fraction of httpx's, so on a small machine the client disturbs what it measures less."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
from floodway.operator.gateway.proxy import BACKEND_HEADER


@dataclass
class Result:
    index: int
    sent_at: float  # time.perf_counter() seconds
    status: int | None = None  # None: no response (connection error)
    backend: str | None = None  # the gateway's x-floodway-backend header
    first_byte_at: float | None = None  # response headers received
    done_at: float | None = None
    body: str = ""
    retry_after: str | None = None
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.done_at - self.sent_at


async def _one(session: aiohttp.ClientSession, i: int, start_at: float, url: str, body: dict,
               headers: dict) -> Result:
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))  # the schedule, not synchronisation
    result = Result(i, time.perf_counter())
    try:
        async with session.post(url, json=body, headers=headers) as r:
            result.first_byte_at = time.perf_counter()
            result.status, result.backend = r.status, r.headers.get(BACKEND_HEADER)
            result.retry_after = r.headers.get("retry-after")
            result.body = (await r.read()).decode(errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        result.error = f"{type(e).__name__}: {e}"
    result.done_at = time.perf_counter()
    return result


async def send_at_rate(url: str, body: dict, n: int, rate: float, headers: dict | None = None,
                       timeout_s: float = 120.0, start_delay_s: float = 0.05) -> list[Result]:
    """POSTs `body` to `url` n times at `rate` per second; returns the results in send order."""
    return await send_each_at_rate(url, [body] * n, rate, headers, timeout_s, start_delay_s)


async def send_each_at_rate(url: str, bodies: list[dict], rate: float, headers: dict | None = None,
                            timeout_s: float = 120.0, start_delay_s: float = 0.05) -> list[Result]:
    """POSTs each of `bodies` to `url` in turn at `rate` per second; returns the results in send order."""
    connector = aiohttp.TCPConnector(limit=4096, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        t0 = time.perf_counter() + start_delay_s
        return list(await asyncio.gather(*(_one(session, i, t0 + i / rate, url, body, headers or {})
                                           for i, body in enumerate(bodies))))
