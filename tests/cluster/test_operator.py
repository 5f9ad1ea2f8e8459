"""`floodway operator` as a subprocess with the chart's ServiceAccount token (so the chart's RBAC is what it
has) against the real control plane: it applies what render() renders, kwok pods become Ready, status and
printer columns follow; the autoscaling loop follows a test-controlled metrics source; deleting the
InferenceService collects what it owned; a restart in the middle of a reconcile converges without duplicates."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from floodway.operator.procs import FLOODWAY_ARGV, free_port, start
from floodway.operator.render import Images, Owner, render
from floodway.operator.render.meta import selector_string
from floodway.operator.spec.resource import parse

pytestmark = pytest.mark.cluster
NS = "serving"


def isvc(name: str, port: int, **spec) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"model": "floodway/tiny-llama", "engine": {"port": port}, "resources": {"gpus": 1}, **spec}}


def rendered(cluster, doc: dict) -> list[dict]:
    """What render() says the operator must create, for the object as the API server stored it."""
    live = cluster.get("-n", NS, "inferenceservice", doc["metadata"]["name"])
    owner = Owner(live["metadata"]["name"], NS, live["metadata"]["uid"])
    return render(parse(live).spec, owner, Images.from_env({}))


def engine_pods(cluster, name: str, metrics=None) -> list[dict]:
    """Engine pods of a service; running ones get a metrics listener on their (loopback) pod IP."""
    pods = cluster.get("-n", NS, "pods", "-l", selector_string(Owner(name, NS, ""), "engine"))["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]
    if metrics is not None:
        for p in running:
            metrics.serve(p["status"]["podIP"])
    return running


def status(cluster, name: str) -> dict:
    return cluster.get("-n", NS, "inferenceservice", name).get("status", {})


def is_ready(st: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))


def events(cluster, name: str, reason: str) -> list[dict]:
    items = cluster.get("-n", NS, "events", "--field-selector", f"involvedObject.name={name}")["items"]
    return [e for e in items if e["reason"] == reason]


def apply(cluster, doc: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def test_a_valid_service_gets_its_objects_and_becomes_ready(cluster, operator, metrics):
    doc = isvc("chat", metrics.port, replicas={"min": 2, "max": 4})
    apply(cluster, doc)
    uid = cluster.get("-n", NS, "inferenceservice", "chat")["metadata"]["uid"]
    for obj in rendered(cluster, doc):
        ref = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
        live = cluster.wait_until(f"{ref} applied", lambda ref=ref: cluster.run(
            "kubectl", "-n", NS, "get", ref, "-o", "json", check=False).stdout)
        owners = json.loads(live)["metadata"].get("ownerReferences", [])
        assert [o["uid"] for o in owners] == [uid], ref
    pods = cluster.wait_until("2 engine pods Running", lambda: len(p := engine_pods(cluster, "chat", metrics)) == 2
                              and p)
    assert all(p["spec"]["nodeName"].startswith("gpu-node-") for p in pods)
    assert all(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1" for p in pods)
    st = cluster.wait_until("status Ready with 2 ready replicas",
                            lambda: (s := status(cluster, "chat")) and is_ready(s) and s.get("readyReplicas") == 2
                            and s)
    assert st["desiredReplicas"] == 2
    row = cluster.kubectl("-n", NS, "get", "inferenceservice", "chat").stdout.splitlines()[1].split()
    assert row[:4] == ["chat", "floodway/tiny-llama", "2", "2"]
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "chat", "--wait=false")


def test_autoscaler_follows_the_metrics_source_up_and_down(cluster, operator, metrics):
    autoscaling = {"intervalSeconds": 1, "targetConcurrency": 4, "scaleUpWindowSeconds": 1, "panicHoldSeconds": 0,
                   "scaleDownStabilizationSeconds": 2, "maxScaleDownStep": 4}
    apply(cluster, isvc("scaler", metrics.port, replicas={"min": 1, "max": 3}, autoscaling=autoscaling))
    cluster.wait_until("1 engine pod Running", lambda: len(engine_pods(cluster, "scaler", metrics)) == 1)

    metrics.set(waiting=40, running=4)  # far more than one replica's target concurrency
    cluster.wait_until("3 engine pods Running", lambda: len(engine_pods(cluster, "scaler", metrics)) == 3, 90)
    assert cluster.get("-n", NS, "deployment", "scaler-engine")["spec"]["replicas"] == 3
    cluster.wait_until("a ScaledUp event to 3 with its reason", lambda: any(
        "-> 3: " in e["message"] for e in events(cluster, "scaler", "ScaledUp")))
    assert status(cluster, "scaler").get("lastScaleReason")

    metrics.set(waiting=0, running=0)
    cluster.wait_until("back to 1 engine pod", lambda: len(engine_pods(cluster, "scaler", metrics)) == 1, 90)
    assert cluster.wait_until("a ScaledDown event", lambda: events(cluster, "scaler", "ScaledDown"))
    assert cluster.get("-n", NS, "deployment", "scaler-engine")["spec"]["replicas"] == 1
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "scaler", "--wait=false")


def test_a_spec_that_cannot_fit_its_gpu_gets_a_warning_condition_and_event(cluster, operator, metrics):
    apply(cluster, isvc("toobig", metrics.port, resources={"gpus": 1, "gpuMemoryGiB": 0.01}))

    def fits_condition():
        return next((c for c in status(cluster, "toobig").get("conditions", []) if c["type"] == "FitsGPU"), None)

    cond = cluster.wait_until("a FitsGPU condition", fits_condition)
    assert (cond["status"], cond["reason"]) == ("False", "DoesNotFit"), cond
    warning = cluster.wait_until("a DoesNotFit event", lambda: events(cluster, "toobig", "DoesNotFit"))
    assert warning[0]["type"] == "Warning"
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "toobig", "--wait=false")


def test_deleting_the_service_collects_everything_it_owned(cluster, operator, metrics):
    doc = isvc("doomed", metrics.port)
    apply(cluster, doc)
    objs = rendered(cluster, doc)
    cluster.wait_until("1 engine pod Running", lambda: len(engine_pods(cluster, "doomed")) == 1)
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "doomed")

    def leftovers() -> list[str]:
        refs = [f"{o['kind'].lower()}/{o['metadata']['name']}" for o in objs]
        found = cluster.run("kubectl", "-n", NS, "get", *refs, "--ignore-not-found", "-o", "name").stdout.split()
        return found + [p["metadata"]["name"] for p in engine_pods(cluster, "doomed")]

    cluster.wait_until("every owned object and pod collected", lambda: not leftovers(), 90)


def test_restart_in_the_middle_of_a_reconcile_converges_without_duplicates(cluster, operator, metrics):
    doc = isvc("restart", metrics.port, replicas={"min": 2, "max": 2})
    apply(cluster, doc)
    # Kill the operator as soon as the first objects exist: the rest of the reconcile has not happened yet.
    cluster.wait_until("the first objects", lambda: cluster.run(
        "kubectl", "-n", NS, "get", "configmap,serviceaccount", "-l", "app.kubernetes.io/instance=restart",
        "-o", "name").stdout, 30, interval_s=0.05)
    operator.kill()
    operator.start()
    cluster.wait_until("Ready after the restart", lambda: is_ready(status(cluster, "restart")), 90)
    for obj in rendered(cluster, doc):
        kind, name = obj["kind"].lower(), obj["metadata"]["name"]
        same = cluster.get("-n", NS, kind, "-l", "app.kubernetes.io/instance=restart")["items"]
        assert [o["metadata"]["name"] for o in same].count(name) == 1, f"{kind}/{name}"
    engine_rs = cluster.get("-n", NS, "rs", "-l", selector_string(Owner("restart", NS, ""), "engine"))["items"]
    assert len(engine_rs) == 1, "a second ReplicaSet means the restarted operator changed the pod template"
    assert len(engine_pods(cluster, "restart")) == 2
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "restart", "--wait=false")


class Metrics:
    """The test-controlled metrics source: Prometheus text on every engine pod's /metrics (one listener per pod
    IP; kwok hands them out from a loopback range) and on the gateway URL the operator is given."""

    def __init__(self, port: int):
        self.port, self.servers = port, {}
        self.set(waiting=0, running=0)

    def set(self, waiting: float, running: float) -> None:
        self.text = "".join(f"# TYPE vllm:{m} gauge\nvllm:{m}{{model_name=\"m\"}} {v}\n"
                            for m, v in (("num_requests_waiting", waiting), ("num_requests_running", running),
                                         ("kv_cache_usage_perc", 0.1)))

    def serve(self, ip: str) -> None:
        if ip in self.servers:
            return
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                body = source.text.encode() if self.path == "/metrics" else b""
                self.send_response(200 if body else 404)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer((ip, self.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers[ip] = server

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()


class Operator:
    """`floodway operator` with the chart's ServiceAccount, the chart's leader-election Lease, and the gateway
    metrics URL pointed at the metrics source."""

    def __init__(self, cluster, kubeconfig, gateway_url: str):
        self.cluster, self.kubeconfig, self.gateway_url, self.proc = cluster, kubeconfig, gateway_url, None

    def start(self) -> None:
        port = free_port()
        argv = [*FLOODWAY_ARGV, "operator", "--kubeconfig", str(self.kubeconfig), "--health-port", str(port),
                "--gateway-url", self.gateway_url, "--lease-namespace", "floodway-system", "--lease-name", "floodway",
                "--lease-duration", "5", "--namespace", NS]
        self.proc = start(argv, port, "/healthz", 60, log_path=str(self.cluster.dir / "operator.log"))

    def kill(self) -> None:
        self.proc.kill()


@pytest.fixture(scope="module")
def metrics():
    source = Metrics(free_port())
    source.serve("127.0.0.1")
    yield source
    source.close()


@pytest.fixture(scope="module")
def operator(cluster, floodway_release, metrics):
    op = Operator(cluster, cluster.service_account_kubeconfig("floodway-system", "floodway"),
                  f"http://127.0.0.1:{metrics.port}")
    op.start()
    yield op
    op.proc.stop()
