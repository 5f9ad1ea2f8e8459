"""Scraping a service's engines and gateway over HTTP into the autoscaler's Scrape record, and the engines'
adapters (controller/adapters.py). A replica whose /metrics cannot be read this tick is left out (it counts as
not ready), never a crash; so is one whose /v1/models cannot be read from its adapters."""

import contextlib
from collections.abc import Collection, Sequence

import httpx
from floodway.operator.autoscaler.signals import ClassCounts, GatewaySample, Scrape, parse_engine, parse_gateway
from floodway.operator.controller.adapters import ReplicaAdapters, failed_adapters, listed_adapters
from floodway.operator.runtimes import DEFAULT, RUNTIMES

TIMEOUT_S = 2.0


@contextlib.contextmanager
def _client(client: httpx.Client | None):
    """The caller's client, or one of our own, closed after use."""
    if client is not None:
        yield client
        return
    with httpx.Client(timeout=TIMEOUT_S) as own:
        yield own


def _get(client: httpx.Client, url: str, parse):
    """parse(response) of a 200 answer, or None when it cannot be fetched or parsed this tick."""
    try:
        r = client.get(url)
    except httpx.HTTPError:
        return None
    try:
        return parse(r) if r.status_code == 200 else None
    except ValueError:  # also a body that is not JSON
        return None


def _metrics(client: httpx.Client, base: str, parse):
    """The parsed /metrics of one target, or None when it cannot be fetched or parsed this tick."""
    return _get(client, f"{base}/metrics", lambda r: parse(r.text))


def scrape(engines: dict[str, str], gateways: str | Sequence[str] | None, starting: int, now: float,
           client: httpx.Client | None = None, runtime: str = DEFAULT) -> Scrape:
    """engines: replica name -> base URL (http://host:port); gateways: the base URL of each gateway replica (or
    of the one gateway); runtime: what the engines run (their metric names)."""
    with _client(client) as client:
        names = RUNTIMES[runtime].metrics
        samples = {name: _metrics(client, base, lambda text: parse_engine(text, names))
                   for name, base in engines.items()}
        ready = {n: s for n, s in samples.items() if s is not None}
        urls = [gateways] if isinstance(gateways, str) else list(gateways or ())
        gateway = _summed([_metrics(client, url, parse_gateway) for url in urls])
        return Scrape(time=now, engines=ready, gateway=gateway, starting=starting + len(samples) - len(ready))


def _summed(samples: list[GatewaySample | None]) -> GatewaySample | None:
    """The service's gateway counters: every replica's, added up. Each replica counts only what it proxied, so
    one read through the Service (a different replica each time) would make the rates noise. None unless every
    replica answered: a missing one would look like a counter reset next tick."""
    if not samples or any(s is None for s in samples):
        return None
    needed: dict[float, float] = {}
    in_flight: dict[str, float] = {}
    slo: dict[str, ClassCounts] = {}
    for s in samples:
        for le, count in s.replicas_needed.items():
            needed[le] = needed.get(le, 0.0) + count
        for c, n in s.class_in_flight.items():
            in_flight[c] = in_flight.get(c, 0.0) + n
        for c, counts in s.class_slo.items():
            slo[c] = slo.get(c, ClassCounts()) + counts
    return GatewaySample(sum(s.requests_total for s in samples), sum(s.overflow_total for s in samples),
                         sum(s.held for s in samples), needed, sum(s.request_tokens_total for s in samples),
                         sum(s.overflow_tokens_total for s in samples), sum(s.declined_total for s in samples),
                         in_flight, slo)


def scrape_adapters(engines: dict[str, str], wanted: Collection[str],
                    client: httpx.Client | None = None) -> dict[str, ReplicaAdapters]:
    """Per replica that answers (engines: replica name -> base URL), the adapters its /v1/models lists; where one of
    `wanted` is absent, the reasons from its /debug/engine (asked only then: nothing is read while all is well)."""
    out = {}
    with _client(client) as client:
        for name, base in engines.items():
            loaded = _get(client, f"{base}/v1/models", lambda r: listed_adapters(r.json()))
            if loaded is None:
                continue
            failed = () if set(wanted) <= set(loaded) else \
                _get(client, f"{base}/debug/engine", lambda r: failed_adapters(r.json())) or ()
            out[name] = ReplicaAdapters(loaded, failed)
    return out
