"""Scraping a service's engines and gateway over HTTP into the autoscaler's Scrape record. A replica
whose /metrics cannot be read this tick is left out (it counts as not ready), never a crash."""

from collections.abc import Sequence

import httpx
from floodway.operator.autoscaler.signals import GatewaySample, Scrape, parse_engine, parse_gateway
from floodway.operator.runtimes import DEFAULT, RUNTIMES

TIMEOUT_S = 2.0


def _metrics(client: httpx.Client, base: str, parse):
    """The parsed /metrics of one target, or None when it cannot be fetched or parsed this tick."""
    try:
        r = client.get(f"{base}/metrics")
        text = r.text if r.status_code == 200 else None
    except httpx.HTTPError:
        return None
    try:
        return parse(text) if text is not None else None
    except ValueError:
        return None


def scrape(engines: dict[str, str], gateways: str | Sequence[str] | None, starting: int, now: float,
           client: httpx.Client | None = None, runtime: str = DEFAULT) -> Scrape:
    """engines: replica name -> base URL (http://host:port); gateways: the base URL of each gateway replica (or
    of the one gateway); runtime: what the engines run (their metric names)."""
    own = client is None
    client = client or httpx.Client(timeout=TIMEOUT_S)
    try:
        names = RUNTIMES[runtime].metrics
        samples = {name: _metrics(client, base, lambda text: parse_engine(text, names))
                   for name, base in engines.items()}
        ready = {n: s for n, s in samples.items() if s is not None}
        urls = [gateways] if isinstance(gateways, str) else list(gateways or ())
        gateway = _summed([_metrics(client, url, parse_gateway) for url in urls])
        return Scrape(time=now, engines=ready, gateway=gateway, starting=starting + len(samples) - len(ready))
    finally:
        if own:
            client.close()


def _summed(samples: list[GatewaySample | None]) -> GatewaySample | None:
    """The service's gateway counters: every replica's, added up. Each replica counts only what it proxied, so
    one read through the Service (a different replica each time) would make the rates noise. None unless every
    replica answered: a missing one would look like a counter reset next tick."""
    if not samples or any(s is None for s in samples):
        return None
    needed: dict[float, float] = {}
    for s in samples:
        for le, count in s.replicas_needed.items():
            needed[le] = needed.get(le, 0.0) + count
    return GatewaySample(sum(s.requests_total for s in samples), sum(s.overflow_total for s in samples),
                         sum(s.held for s in samples), needed)
