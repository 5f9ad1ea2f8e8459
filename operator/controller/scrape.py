"""Scraping a service's engines and gateway over HTTP into the autoscaler's Scrape record. A replica
whose /metrics cannot be read this tick is left out (it counts as not ready), never a crash."""

import httpx
from floodway.operator.autoscaler.signals import Scrape, parse_engine, parse_gateway

TIMEOUT_S = 2.0


def _get(client: httpx.Client, url: str) -> str | None:
    try:
        r = client.get(url)
        return r.text if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


def scrape(engines: dict[str, str], gateway_url: str | None, starting: int, now: float,
           client: httpx.Client | None = None) -> Scrape:
    """engines: replica name -> base URL (http://host:port); gateway_url: its base URL or None."""
    own = client is None
    client = client or httpx.Client(timeout=TIMEOUT_S)
    try:
        samples, failed = {}, 0
        for name, base in engines.items():
            text = _get(client, f"{base}/metrics")
            try:
                samples[name] = parse_engine(text) if text is not None else None
            except ValueError:
                samples[name] = None
            failed += samples[name] is None
        gateway = None
        if gateway_url:
            text = _get(client, f"{gateway_url}/metrics")
            try:
                gateway = parse_gateway(text) if text is not None else None
            except ValueError:
                gateway = None
        ready = {n: s for n, s in samples.items() if s is not None}
        return Scrape(time=now, engines=ready, gateway=gateway, starting=starting + failed)
    finally:
        if own:
            client.close()
