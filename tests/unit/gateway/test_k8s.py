"""The EndpointSlice follower: pure event folding and backoff, and the list-then-watch loop against a scripted
fake of the Kubernetes client (the real client's Watch parses the fake's byte stream)."""

import asyncio
import json
import queue
import random
import threading

import pytest
from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import KubernetesSource
from floodway.operator.gateway.k8s import SliceFollower, apply_event, backoff_s, event_version, follow_endpoint_slices
from floodway.operator.gateway.routing import RoutingWeights

SOURCE = KubernetesSource(namespace="ns", service="engine", port="http", refresh_s=0.01)


def eps(name: str, rv: str, *addresses: str, terminating: bool = False) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}, "ports": [{"name": "http", "port": 8000}],
            "endpoints": [{"addresses": [a], "conditions": {"terminating": terminating}} for a in addresses]}


def event(kind: str, obj: dict) -> dict:
    """An event as the client's Watch yields it."""
    return {"type": kind, "raw_object": obj}


def wire(kind: str, obj: dict) -> dict:
    """An event as the API server sends it."""
    return {"type": kind, "object": obj}


def test_apply_event_replaces_removes_and_never_mutates():
    before = {"a": eps("a", "1", "10.0.0.1")}
    added = apply_event(before, event("ADDED", eps("b", "2", "10.0.0.2")))
    assert set(added) == {"a", "b"} and set(before) == {"a"}
    modified = apply_event(added, event("MODIFIED", eps("a", "3", "10.0.0.3")))
    assert modified["a"]["endpoints"][0]["addresses"] == ["10.0.0.3"]
    assert set(apply_event(modified, event("DELETED", eps("a", "4")))) == {"b"}
    assert apply_event(modified, event("DELETED", eps("zzz", "5"))) == modified
    bookmark = event("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert apply_event(modified, bookmark) == modified
    assert event_version(bookmark, "3") == "9"
    assert event_version(event("ADDED", {"metadata": {"name": "x"}}), "3") == "3"


def test_backoff_doubles_from_the_period_and_is_capped():
    assert [backoff_s(n, 2.0) for n in (1, 2, 3, 5, 6, 50)] == [2.0, 4.0, 8.0, 32.0, 32.0, 32.0]


class FakeResponse:
    """A urllib3-like watch response: yields the scripted events, then blocks until its socket is shut down
    (as a quiet watch does) unless `end` says the server ends it."""

    status = 200

    def __init__(self, events: list[dict], end: bool):
        self.events, self.end, self.shut = events, end, threading.Event()
        self.connection = self
        self.sock = self

    def shutdown(self, how) -> None:
        self.shut.set()

    def stream(self, amt=None, decode_content=False):
        for e in self.events:
            yield (json.dumps(e) + "\n").encode()
        if not self.end:
            self.shut.wait(10)
            if self.shut.is_set():
                raise ConnectionResetError("socket shut down")

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeApi:
    """Scripted answers: `lists` for list calls (dict, or an exception to raise), `watches` for watch calls
    ((events, server ends it)); records the resourceVersion each watch asked for."""

    def __init__(self, lists: list, watches: list):
        self.lists, self.watches, self.watched_from, self.responses = lists, watches, [], []
        self.api_client = self

    def sanitize_for_serialization(self, obj):
        return obj

    def list_namespaced_endpoint_slice(self, namespace, label_selector=None, watch=False, resource_version=None,
                                       **kwargs):
        assert (namespace, label_selector) == ("ns", "kubernetes.io/service-name=engine")
        if not watch:
            answer = self.lists.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        self.watched_from.append(resource_version)
        events, end = self.watches.pop(0) if self.watches else ([], False)
        self.responses.append(FakeResponse(events, end))
        return self.responses[-1]


def listing(rv: str, *slices: dict) -> dict:
    return {"metadata": {"resourceVersion": rv}, "items": list(slices)}


def test_follower_lists_watches_resumes_relists_and_keeps_the_last_set_through_errors():
    api = FakeApi(
        lists=[listing("1", eps("a", "1", "10.0.0.1")), ConnectionError("API down"),
               listing("10", eps("c", "10", "10.0.0.3"))],
        watches=[([wire("ADDED", eps("b", "2", "10.0.0.2")),
                   wire("MODIFIED", eps("a", "3", "10.0.0.1", terminating=True)),
                   wire("BOOKMARK", {"metadata": {"resourceVersion": "4"}})], True),
                 ([wire("ERROR", {"code": 410, "reason": "Expired", "message": "too old"})], True),
                 ([wire("DELETED", eps("c", "11"))], False)])
    factory_calls = []

    def factory():
        factory_calls.append(1)
        if len(factory_calls) == 1:
            raise OSError("no kubeconfig yet")
        return api

    published = queue.Queue()
    follower = SliceFollower(SOURCE, published.put, factory)
    thread = threading.Thread(target=follower.run, daemon=True)
    thread.start()
    seen = [[e[0] for e in published.get(timeout=10)] for _ in range(4)]
    assert seen == [["10.0.0.1:8000"], ["10.0.0.1:8000", "10.0.0.2:8000"], ["10.0.0.2:8000"], ["10.0.0.3:8000"]]
    assert published.get(timeout=10) == []  # the last slice deleted
    assert api.watched_from == ["1", "4", "10"]  # resumed after a watch ended, relisted after 410
    assert len(factory_calls) == 2 and api.lists == []
    follower.stop()
    thread.join(5)
    assert not thread.is_alive() and api.responses[-1].shut.is_set()
    assert published.empty()  # the failed list published nothing: the last set stayed


async def test_follow_task_fills_the_table_and_cancelling_stops_the_watch_thread():
    api = FakeApi(lists=[listing("1", eps("a", "1", "10.0.0.1"))], watches=[])
    table = BackendTable(RoutingWeights(), random.Random(0))
    task = asyncio.create_task(follow_endpoint_slices(SOURCE, table, lambda: api))
    deadline = asyncio.get_running_loop().time() + 10
    while "10.0.0.1:8000" not in table.backends or not api.responses:
        assert asyncio.get_running_loop().time() < deadline, "the table never got the listed endpoint"
        await asyncio.sleep(0.01)  # poll interval; the deadline bounds the wait
    assert table.backends["10.0.0.1:8000"].url == "http://10.0.0.1:8000"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    threads = [t for t in threading.enumerate() if t.name == "endpointslice-watch"]
    for t in threads:
        t.join(5)
    assert api.responses[0].shut.is_set() and not any(t.is_alive() for t in threads)
