"""Backends from Kubernetes: the endpoints of the engine Service, read from its EndpointSlices
(discovery.k8s.io/v1) every `refresh_s`. Endpoints that Kubernetes marks not ready are still listed (the
gateway's own probes decide readiness), so a pod that turns ready is used at the next probe; terminating
endpoints are left out."""

from __future__ import annotations

import asyncio
import logging

from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import KubernetesSource

log = logging.getLogger("floodway.gateway")


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


def _discovery_api():
    from kubernetes import client, config  # the control-plane image has it; imported only when used

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.DiscoveryV1Api(client.ApiClient())


def _list_slices(api, source: KubernetesSource) -> list[dict]:
    result = api.list_namespaced_endpoint_slice(source.namespace,
                                                label_selector=f"kubernetes.io/service-name={source.service}")
    return api.api_client.sanitize_for_serialization(result).get("items", [])


async def follow_endpoint_slices(source: KubernetesSource, table: BackendTable) -> None:
    """Runs until cancelled: lists the Service's slices and updates the table; API errors are logged and
    the last known set stays."""
    api = None
    while True:
        try:
            api = api or await asyncio.to_thread(_discovery_api)
            slices = await asyncio.to_thread(_list_slices, api, source)
            table.set_endpoints(endpoints_from_slices(slices, source.port))
        except Exception as e:  # the API server may be briefly unreachable; keep serving what we know
            log.warning("listing EndpointSlices of %s/%s failed: %s", source.namespace, source.service, e)
        await asyncio.sleep(source.refresh_s)  # refresh period, not synchronisation
