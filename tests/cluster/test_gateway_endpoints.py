"""`floodway gateway` with `backends.kubernetes` against the real control plane: a real gateway process (with
a ServiceAccount that may only get/list/watch EndpointSlices, the Role the operator renders for it) follows the
EndpointSlices of a Service whose endpoints are real engine processes. A slice added, an endpoint marked
terminating and a slice deleted each reach the gateway's routing table within WATCH_BOUND_S. Only the watch can
deliver them that fast: the gateway lists again only after an error or an expired watch, at refresh_s (set far
above the bound here), and the Role is checked in force before it starts, so no error backoff is in play.

The API server refuses loopback addresses in EndpointSlices (422 "may not be in the loopback range"; kwok's
127.1.x.x pod IPs pass only because pod IPs are not checked that way), so the slices carry this machine's own
non-loopback IPv4 address and the engines listen on that address only, for the test's ~25 s."""

import concurrent.futures
import signal
import socket
import time

import httpx
import pytest
import yaml
from floodway.operator import procs

NS, SERVICE, MODEL = "gw-endpoints", "engine", "floodway/tiny-llama"
# A change through the watch takes well under a second; 5 s is margin for a loaded 2-core machine. A gateway that
# listed every REFRESH_S instead would meet the bound for each of the three changes only by chance (1 in 24 each).
WATCH_BOUND_S = 5.0
REFRESH_S = 120.0


def own_address() -> str | None:
    """The address this machine's default route leaves from (a UDP connect sends nothing); None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # TEST-NET-2: only the route is looked up
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture(scope="module")
def engine_address() -> str:
    address = own_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address: EndpointSlices cannot point at a loopback engine")
    return address


def start_engine(log_dir, name: str, address: str) -> procs.Proc:
    port = procs.free_port()
    argv = procs.FLOODWAY_ARGV + ["engine", "--model", MODEL, "--host", address, "--port", str(port)]
    return procs.start(argv, port, timeout_s=300, log_path=str(log_dir / f"{name}.log"), host=address)


@pytest.fixture(scope="module")
def engines(tmp_path_factory, engine_address):
    """Two engine processes, started side by side (each takes seconds to load)."""
    log_dir = tmp_path_factory.mktemp("engines")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start_engine, log_dir, name, engine_address) for name in ("engine-a", "engine-b")]
    started = [f.result() for f in futures if f.exception() is None]
    try:
        if len(started) < 2:
            raise next(f.exception() for f in futures if f.exception() is not None)
        yield started
    finally:
        for proc in started:
            proc.stop(grace_s=5)


@pytest.fixture(scope="module")
def api(cluster):
    """Admin clients (core, discovery) of the test cluster; the namespace, the Service and the gateway's RBAC."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, discovery = client.CoreV1Api(api_client), client.DiscoveryV1Api(api_client)
    core.create_namespace({"metadata": {"name": NS}})
    # No selector: the slices are ours, as an endpoints controller's would be.
    core.create_namespaced_service(NS, {"metadata": {"name": SERVICE}, "spec": {"ports": [{"name": "http",
                                                                                           "port": 8000}]}})
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(NS, {"metadata": {"name": "gateway"}})
    rbac.create_namespaced_role(NS, {"metadata": {"name": "gateway"}, "rules": [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]})
    rbac.create_namespaced_role_binding(NS, {
        "metadata": {"name": "gateway"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                     "name": "gateway"},
        "subjects": [{"kind": "ServiceAccount", "name": "gateway", "namespace": NS}]})
    # The gateway's ServiceAccount may list the slices before the gateway starts (RBAC caches take a moment).
    account = config.new_client_from_config(config_file=str(cluster.service_account_kubeconfig(NS, "gateway")))

    def may_list() -> bool:
        try:
            client.DiscoveryV1Api(account).list_namespaced_endpoint_slice(NS)
        except client.ApiException:
            return False
        return True

    cluster.wait_until("the gateway's Role in force", may_list, 30)
    account.close()
    yield core, discovery
    core.delete_namespace(NS)
    api_client.close()


def endpoint_slice(name: str, address: str, engine: procs.Proc, terminating: bool = False) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": SERVICE,
                                                  "endpointslice.kubernetes.io/managed-by": "floodway-test"}},
            "ports": [{"name": "http", "port": engine.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "targetRef": {"kind": "Pod", "name": name, "namespace": NS},
                           "conditions": {"ready": True, "serving": True, "terminating": terminating}}]}


def backend_ids(gateway: procs.Proc, ready_only: bool = False) -> set[str]:
    state = httpx.get(gateway.url + "/debug/state", timeout=5).json()
    return {b["id"] for b in state["backends"] if b["ready"] or not ready_only}


def wait_for(what: str, check, timeout_s: float = 20.0, interval_s: float = 0.005) -> float:
    """Polls check() until true; returns the seconds it took (the propagation time when started right after a
    change was acknowledged by the API server)."""
    start = time.monotonic()
    procs.wait_until(check, timeout_s, what, interval_s)
    return time.monotonic() - start


def complete(gateway: procs.Proc) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/completions", timeout=60,
                      json={"model": MODEL, "prompt": "hello", "max_tokens": 2})


def test_gateway_follows_the_services_endpoint_slices(cluster, engines, engine_address, api, tmp_path,
                                                      validate_reply):
    core, discovery = api
    a, b = engines
    id_a, id_b = f"engine-a:{a.port}", f"engine-b:{b.port}"
    discovery.create_namespaced_endpoint_slice(NS, endpoint_slice("engine-a", engine_address, a))

    port = procs.free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": port, "served_models": [MODEL], "scrape_interval_s": 0.2, "debug_state": True,
        "backends": {"kubernetes": {"namespace": NS, "service": SERVICE, "port": "http", "refresh_s": REFRESH_S}}}))
    kubeconfig = cluster.service_account_kubeconfig(NS, "gateway")
    gateway = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(config)], port, "/ready", timeout_s=60,
                          env={"KUBECONFIG": str(kubeconfig)}, log_path=str(tmp_path / "gateway.log"))
    try:
        first = complete(gateway)
        assert first.status_code == 200 and first.headers["x-floodway-backend"] == id_a
        validate_reply(first)

        propagation = {}
        discovery.create_namespaced_endpoint_slice(NS, endpoint_slice("engine-b", engine_address, b))
        propagation["slice added"] = wait_for("engine-b listed", lambda: id_b in backend_ids(gateway))
        wait_for("engine-b ready", lambda: id_b in backend_ids(gateway, ready_only=True))
        served = set()
        wait_for("a completion served by engine-b",
                 lambda: served.add(complete(gateway).headers["x-floodway-backend"]) or id_b in served, 30, 0)

        terminating = endpoint_slice("engine-a", engine_address, a, terminating=True)["endpoints"]
        discovery.patch_namespaced_endpoint_slice("engine-a", NS, {"endpoints": terminating})
        propagation["endpoint terminating"] = wait_for("engine-a dropped", lambda: id_a not in backend_ids(gateway))
        assert {complete(gateway).headers["x-floodway-backend"] for _ in range(6)} == {id_b}

        discovery.delete_namespaced_endpoint_slice("engine-b", NS)
        propagation["slice deleted"] = wait_for("engine-b dropped", lambda: not backend_ids(gateway))
        refused = complete(gateway)  # no backend left and no overflow configured
        assert refused.status_code in (429, 503) and "x-floodway-backend" not in refused.headers
        validate_reply(refused)
        print("\nEndpointSlice change -> gateway routing table (watch): "
              + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in propagation.items()) + f" (bound {WATCH_BOUND_S} s)")
        assert max(propagation.values()) <= WATCH_BOUND_S, propagation
        assert "EndpointSlices of" not in gateway.log_tail(10**6)  # no error, hence no list after a backoff
    finally:
        started = time.monotonic()
        gateway.popen.terminate()
        code = gateway.popen.wait(timeout=20)  # a hung watch thread would hold the process here
        print(f"gateway shutdown took {time.monotonic() - started:.2f}s")
        # uvicorn re-raises the SIGTERM it handled once its shutdown is complete
        assert code == -signal.SIGTERM and "Application shutdown complete" in gateway.log_tail(), gateway.log_tail()
