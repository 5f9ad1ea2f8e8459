"""Scraping a service's engines and gateway over HTTP into the autoscaler's Scrape record. A replica
whose /metrics cannot be read this tick is left out (it counts as not ready), never a crash."""

import httpx
from floodway.operator.autoscaler.signals import Scrape, parse_engine, parse_gateway
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


def scrape(engines: dict[str, str], gateway_url: str | None, starting: int, now: float,
           client: httpx.Client | None = None, runtime: str = DEFAULT) -> Scrape:
    """engines: replica name -> base URL (http://host:port); gateway_url: its base URL or None; runtime: what
    the engines run (their metric names)."""
    own = client is None
    client = client or httpx.Client(timeout=TIMEOUT_S)
    try:
        names = RUNTIMES[runtime].metrics
        samples = {name: _metrics(client, base, lambda text: parse_engine(text, names))
                   for name, base in engines.items()}
        ready = {n: s for n, s in samples.items() if s is not None}
        gateway = _metrics(client, gateway_url, parse_gateway) if gateway_url else None
        return Scrape(time=now, engines=ready, gateway=gateway, starting=starting + len(samples) - len(ready))
    finally:
        if own:
            client.close()
