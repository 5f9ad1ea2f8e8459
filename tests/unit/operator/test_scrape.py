"""The operator's scrape of a service: each gateway replica read by its own URL and the counters added up (one
read through the Service would see a different replica's counters each tick). Served by httpx's in-process
transport: this pins the merge, the HTTP path is the integration tests'."""

import httpx
from floodway.operator.autoscaler.signals import (
    GW_DECLINED,
    GW_HELD,
    GW_NEEDED,
    GW_OVERFLOW,
    GW_OVERFLOW_TOKENS,
    GW_REQUESTS,
    GW_TOKENS,
)
from floodway.operator.controller.scrape import scrape


def gateway_text(requests: float, overflow: float, held: float) -> str:
    # Every request needed at most 2 replicas but one (floodway_gateway_replicas_needed, a histogram).
    return (f'{GW_REQUESTS}{{backend="overflow",outcome="ok"}} {requests}\n'
            f'{GW_OVERFLOW}{{reason="queue"}} {overflow}\n{GW_HELD} {held}\n'
            f'# TYPE {GW_NEEDED} histogram\n{GW_NEEDED}_bucket{{le="1.0"}} 0\n'
            f'{GW_NEEDED}_bucket{{le="2.0"}} {requests - 1}\n{GW_NEEDED}_bucket{{le="+Inf"}} {requests}\n'
            f'{GW_NEEDED}_count {requests}\n{GW_NEEDED}_sum 0\n'
            f'{GW_TOKENS} {requests * 100}\n{GW_OVERFLOW_TOKENS} {overflow * 300}\n{GW_DECLINED} {held}\n')


def client(pages: dict[str, str | None]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        text = pages[f"{request.url.scheme}://{request.url.host}"]
        return httpx.Response(200, text=text) if text is not None else httpx.Response(503)
    return httpx.Client(transport=httpx.MockTransport(answer))


def test_gateway_replicas_are_summed():
    pages = {"http://gw-a": gateway_text(10, 4, 1), "http://gw-b": gateway_text(5, 2, 0)}
    got = scrape({}, ["http://gw-a", "http://gw-b"], 0, 1.0, client=client(pages)).gateway
    assert (got.requests_total, got.overflow_total, got.held) == (15, 6, 1)
    assert got.replicas_needed == {1.0: 0, 2.0: 13, float("inf"): 15}  # the histograms too, bucket by bucket
    assert (got.request_tokens_total, got.overflow_tokens_total, got.declined_total) == (1500, 1800, 1)
    one = scrape({}, "http://gw-a", 0, 1.0, client=client(pages)).gateway  # a single gateway by its URL
    assert (one.requests_total, one.overflow_total, one.held) == (10, 4, 1)


def test_a_replica_that_does_not_answer_leaves_the_gateway_unread_this_tick():
    # Its counters missing from the sum would read as a counter reset on the next tick.
    pages = {"http://gw-a": gateway_text(10, 4, 1), "http://gw-b": None}
    assert scrape({}, ["http://gw-a", "http://gw-b"], 0, 1.0, client=client(pages)).gateway is None
    assert scrape({}, [], 0, 1.0, client=client(pages)).gateway is None
