"""Backends from Kubernetes: the endpoints of the engine Service, read from its EndpointSlices
(discovery.k8s.io/v1). The slices are listed once, then watched, so a change reaches the gateway as soon as
the API server sends it; a watch that ends is resumed from the last resourceVersion, and a 410 Gone (history
compacted) or any error leads to a fresh list, after a backoff for errors. While the API server is unreachable
the last known endpoints stay. Endpoints that Kubernetes marks not ready are still listed (the gateway's own
probes decide readiness), so a pod that turns ready is used at the next probe; terminating endpoints are left
out.

The blocking client runs in a daemon thread that hands every new endpoint set to the event loop; cancelling
the task stops the thread at once (the watch's socket is shut down), and even a thread stuck in a list call
cannot delay the process's exit."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import KubernetesSource

log = logging.getLogger("floodway.gateway")

WATCH_TIMEOUT_S = 30  # the API server ends each watch after this; it is then resumed
LIST_TIMEOUT_S = 10.0
MAX_BACKOFF_DOUBLINGS = 4  # errors back off refresh_s, 2x, 4x, 8x, then 16x refresh_s


def _port(ports: list[dict], wanted: int | str | None) -> int | None:
    for p in ports or []:
        if wanted is None or p.get("name") == wanted or p.get("port") == wanted:
            return p.get("port")
    return None


def endpoints_from_slices(slices: list[dict], wanted_port: int | str | None) -> list[tuple[str, str]]:
    """[(backend id, base URL)] from EndpointSlice objects as JSON dicts (camelCase keys, as the API
    serves them). The id is the pod name when the slice names it, else the address."""
    found: dict[str, str] = {}
    for s in slices:
        port = _port(s.get("ports"), wanted_port)
        if port is None:
            continue
        for ep in s.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("terminating"):
                continue
            for address in (ep.get("addresses") or [])[:1]:  # all addresses of an endpoint are one pod
                host = f"[{address}]" if ":" in address else address
                name = (ep.get("targetRef") or {}).get("name") or address
                found[f"{name}:{port}"] = f"http://{host}:{port}"
    return sorted(found.items())


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def apply_event(slices: dict[str, dict], event: dict) -> dict[str, dict]:
    """The slices by name after one watch event (a new dict; `slices` is not changed). ADDED and MODIFIED
    replace the slice, DELETED removes it, BOOKMARK changes nothing (ERROR events never get here: the client
    raises them)."""
    kind, obj = event.get("type"), event.get("raw_object") or {}
    name = (obj.get("metadata") or {}).get("name")
    if kind in ("ADDED", "MODIFIED") and name:
        return {**slices, name: obj}
    if kind == "DELETED" and name:
        return {k: v for k, v in slices.items() if k != name}
    return slices


def event_version(event: dict, current: str) -> str:
    """The resourceVersion to resume a watch from after `event` (bookmarks carry one too)."""
    obj = event.get("raw_object") or {}
    return (obj.get("metadata") or {}).get("resourceVersion") or current


def backoff_s(failures: int, period_s: float) -> float:
    """Wait before the next list after `failures` consecutive errors (>= 1)."""
    return period_s * 2 ** min(max(failures - 1, 0), MAX_BACKOFF_DOUBLINGS)


def _discovery_api():
    from kubernetes import client, config  # the control-plane image has it; imported only when used

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.DiscoveryV1Api(client.ApiClient())


class SliceFollower:
    """The blocking side: lists the Service's slices, then watches them, and calls `publish(endpoints)` from
    its thread whenever the endpoint set changes. `run` returns only after `stop`."""

    def __init__(self, source: KubernetesSource, publish: Callable[[list[tuple[str, str]]], None],
                 api_factory: Callable = _discovery_api):
        self.source, self.publish, self.api_factory = source, publish, api_factory
        self.selector = f"kubernetes.io/service-name={source.service}"
        self.slices: dict[str, dict] = {}
        self._published: list[tuple[str, str]] | None = None
        self._stopped = threading.Event()
        self._watch = None

    def stop(self) -> None:
        self._stopped.set()
        watch = self._watch
        if watch is not None:
            watch.stop()  # shuts the socket down: the blocked read returns now, not at the watch timeout

    def run(self) -> None:
        api, failures = None, 0
        while not self._stopped.is_set():
            try:
                api = api or self.api_factory()
                version = self._list(api)
                failures = 0
                while not self._stopped.is_set():
                    version = self._watch_once(api, version)
            except WatchExpired as e:
                log.info("EndpointSlice watch of %s/%s expired (%s); listing again",
                         self.source.namespace, self.source.service, e)
            except Exception as e:  # the API server may be briefly unreachable; keep serving what we know
                if self._stopped.is_set():
                    return  # stop() shut the watch's socket down
                failures += 1
                log.warning("EndpointSlices of %s/%s: %s (retry in %.1fs)", self.source.namespace,
                            self.source.service, e, backoff_s(failures, self.source.refresh_s))
                self._stopped.wait(backoff_s(failures, self.source.refresh_s))  # backoff; stop() ends it early

    def _list(self, api) -> str:
        result = api.list_namespaced_endpoint_slice(self.source.namespace, label_selector=self.selector,
                                                    _request_timeout=LIST_TIMEOUT_S)
        listed = api.api_client.sanitize_for_serialization(result)
        self.slices = {s["metadata"]["name"]: s for s in listed.get("items") or []}
        self._publish()
        return (listed.get("metadata") or {}).get("resourceVersion") or ""

    def _watch_once(self, api, version: str) -> str:
        """One watch request until the server ends it; returns the version to resume from."""
        from kubernetes import watch

        self._watch = watch.Watch()
        if self._stopped.is_set():  # stop() ran before the watch existed
            return version
        try:
            for event in self._watch.stream(
                    api.list_namespaced_endpoint_slice, self.source.namespace, label_selector=self.selector,
                    resource_version=version, allow_watch_bookmarks=True, timeout_seconds=WATCH_TIMEOUT_S,
                    _request_timeout=(LIST_TIMEOUT_S, WATCH_TIMEOUT_S + LIST_TIMEOUT_S)):
                self.slices = apply_event(self.slices, event)
                version = event_version(event, version)
                self._publish()
        except Exception as e:
            if getattr(e, "status", None) == 410:  # the client raises ERROR events as ApiException
                raise WatchExpired(str(e)) from None
            raise
        finally:
            self._watch = None
        return version

    def _publish(self) -> None:
        endpoints = endpoints_from_slices(list(self.slices.values()), self.source.port)
        if endpoints != self._published:
            self._published = endpoints
            self.publish(endpoints)


async def follow_endpoint_slices(source: KubernetesSource, table: BackendTable,
                                 api_factory: Callable = _discovery_api) -> None:
    """Runs until cancelled: keeps the table's endpoints equal to the Service's slices."""
    loop = asyncio.get_running_loop()

    def publish(endpoints: list[tuple[str, str]]) -> None:
        log.info("endpoints of %s/%s: %s", source.namespace, source.service, [e[0] for e in endpoints])
        loop.call_soon_threadsafe(table.set_endpoints, endpoints)  # the table belongs to the loop's thread

    follower = SliceFollower(source, publish, api_factory)
    threading.Thread(target=follower.run, name="endpointslice-watch", daemon=True).start()
    try:
        await loop.create_future()  # never resolves: the task lives until cancelled
    finally:
        follower.stop()
