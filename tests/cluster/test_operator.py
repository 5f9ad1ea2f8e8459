"""`floodway operator` as a subprocess with the chart's ServiceAccount token (so the chart's RBAC is what it
has) against the real control plane: it applies what render() renders, kwok pods become Ready, status and
printer columns follow; the autoscaling loop follows a test-controlled metrics source; deleting the
InferenceService collects what it owned; a restart in the middle of a reconcile converges without duplicates;
the traffic history the forecast reads survives an operator restart (its ConfigMap);
autoscaling.mode external follows the scale subresource (kubectl scale, a real HPA); a missing claim, an
object the operator did not create and an adapter the engines did not load are named in conditions and events."""

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from floodway.operator.autoscaler.history import History
from floodway.operator.controller.history_store import KEY
from floodway.operator.controller.status import rfc3339
from floodway.operator.procs import FLOODWAY_ARGV, free_port, start
from floodway.operator.render import Images, Owner, render
from floodway.operator.render.meta import selector_string
from floodway.operator.spec.resource import parse

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


def saved_history(cluster, name: str) -> History | None:
    """The history in the service's ConfigMap, None while there is none."""
    done = cluster.kubectl("-n", NS, "get", "configmap", f"{name}-history", "-o", "json", check=False)
    return History.loads(json.loads(done.stdout)["binaryData"][KEY]) if done.returncode == 0 else None


def requests_in(history: History | None) -> float:
    return sum(r for r, _ in history.buckets.values()) if history else 0.0


def test_the_traffic_history_survives_an_operator_restart(cluster, operator, metrics):
    """The ConfigMap <name>-history appears on the first tick and, a minute on, holds the requests the gateway
    counted; a restarted operator goes on with it (status.history keeps its start) instead of a new one."""
    apply(cluster, isvc("memory", metrics.port, replicas={"min": 1, "max": 1}, autoscaling={"intervalSeconds": 1}))
    try:
        cluster.wait_until("the history ConfigMap and status.history", lambda: saved_history(cluster, "memory")
                           and status(cluster, "memory").get("history", {}).get("minutes", 0) >= 1, 60)
        live = cluster.get("-n", NS, "configmap", "memory-history")
        uid = cluster.get("-n", NS, "inferenceservice", "memory")["metadata"]["uid"]
        assert [o["uid"] for o in live["metadata"]["ownerReferences"]] == [uid]
        metrics.set(waiting=0, running=0, requests=30)  # 30 requests reached the gateway
        # saved once a minute: by the first tick of the next one
        saved = cluster.wait_until("the 30 requests in the saved history",
                                   lambda: requests_in(h := saved_history(cluster, "memory")) >= 30 and h, 90)
        before = status(cluster, "memory")["history"]
        assert before["since"] == rfc3339(datetime.fromtimestamp(saved.since(), timezone.utc)), before
        operator.kill()
        # Only the restarted operator can write status.history again: the marker that it has ticked.
        cluster.kubectl("-n", NS, "patch", "inferenceservice", "memory", "--subresource=status", "--type=merge",
                        "-p", '{"status": {"history": null}}')
        operator.start()
        after = cluster.wait_until("status.history after the restart",
                                   lambda: status(cluster, "memory").get("history"), 90)
        # A new history would start at the current minute, a minute at least after the saved one's start.
        assert after["since"] == before["since"] and after["minutes"] >= before["minutes"], (before, after)
        again = saved_history(cluster, "memory")  # saved on the restarted operator's first tick
        assert again.since() == saved.since() and requests_in(again) >= requests_in(saved)
    finally:
        metrics.set(waiting=0, running=0)
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "memory")
    cluster.wait_until("the history ConfigMap collected with its service",
                       lambda: saved_history(cluster, "memory") is None, 90)


def condition(cluster, name: str, type_: str) -> dict | None:
    return next((c for c in status(cluster, name).get("conditions", []) if c["type"] == type_), None)


def test_external_mode_leaves_the_replicas_to_the_scale_subresource_and_an_hpa(cluster, operator, metrics):
    """autoscaling.mode external: `kubectl scale` and a real HorizontalPodAutoscaler (kube-controller-manager's)
    move replicas.count through the scale subresource, and the operator follows it, not its own autoscaler."""
    apply(cluster, isvc("ext", metrics.port, replicas={"min": 1, "max": 4},
                        autoscaling={"mode": "external", "intervalSeconds": 1}))
    cluster.wait_until("1 engine pod Running", lambda: len(engine_pods(cluster, "ext", metrics)) == 1)
    metrics.set(waiting=40, running=4)  # the operator's own autoscaler would scale up on this
    cluster.kubectl("-n", NS, "scale", "inferenceservice", "ext", "--replicas=3")
    cluster.wait_until("3 engine pods Running", lambda: len(engine_pods(cluster, "ext", metrics)) == 3, 90)
    assert cluster.get("-n", NS, "inferenceservice", "ext")["spec"]["replicas"]["count"] == 3
    scale = json.loads(cluster.kubectl("-n", NS, "get", "--raw", f"/apis/serving.floodway.io/v1alpha1/namespaces/"
                                       f"{NS}/inferenceservices/ext/scale").stdout)
    assert scale["spec"]["replicas"] == 3
    cluster.wait_until("status.replicas 3 (the scale subresource's current count)",
                       lambda: status(cluster, "ext").get("replicas") == 3, 60)
    # An HPA below its minReplicas raises the target to it without needing any metric.
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "ext", "namespace": NS},
           "spec": {"scaleTargetRef": {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
                                       "name": "ext"}, "minReplicas": 4, "maxReplicas": 4,
                    "metrics": [{"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                                          "target": {"type": "AverageValue", "averageValue": "4"}}}]}}
    apply(cluster, hpa)
    cluster.wait_until("4 engine pods Running after the HPA", lambda: len(engine_pods(cluster, "ext", metrics)) == 4,
                       120)
    assert cluster.get("-n", NS, "deployment", "ext-engine")["spec"]["replicas"] == 4
    metrics.set(waiting=0, running=0)
    cluster.kubectl("-n", NS, "delete", "hpa", "ext")
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "ext", "--wait=false")


def test_a_missing_claim_is_named_in_conditions_and_events_until_it_exists(cluster, operator, metrics):
    apply(cluster, isvc("onclaim", metrics.port, autoscaling={"intervalSeconds": 1},
                        storage={"modelClaim": {"name": "models", "path": "tiny-llama"}}))
    storage = cluster.wait_until("StorageAvailable False", lambda: (c := condition(cluster, "onclaim",
                                                                                     "StorageAvailable"))
                                 and c["status"] == "False" and c)
    assert storage["reason"] == "ClaimUnavailable" and f"PersistentVolumeClaim {NS}/models not found" in \
        storage["message"]
    assert cluster.wait_until("a ClaimUnavailable event", lambda: events(cluster, "onclaim", "ClaimUnavailable"))
    pods = cluster.wait_until("PodsHealthy False (the scheduler's reason)", lambda: (
        c := condition(cluster, "onclaim", "PodsHealthy")) and c["status"] == "False" and c)
    assert pods["reason"] == "Unschedulable" and '"models"' in pods["message"], pods
    # A statically bound claim: the pod schedules, and both conditions clear.
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "onclaim-models"},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                   "hostPath": {"path": "/var/lib/floodway-test-models"},
                   "claimRef": {"namespace": NS, "name": "models"}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": NS},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": "onclaim-models",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    apply(cluster, pv)
    apply(cluster, pvc)
    cluster.wait_until("1 engine pod Running on the claim", lambda: len(engine_pods(cluster, "onclaim")) == 1, 90)
    cluster.wait_until("StorageAvailable and PodsHealthy True", lambda: all(
        (c := condition(cluster, "onclaim", t)) and c["status"] == "True" for t in ("StorageAvailable", "PodsHealthy")),
        60)
    pod = engine_pods(cluster, "onclaim")[0]["spec"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/models/tiny-llama"
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "onclaim", "--wait=false")


def test_an_object_the_operator_did_not_create_is_not_adopted(cluster, operator, metrics):
    users = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken", "namespace": NS,
                                                                 "labels": {"owner": "user"}},
             "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]}}
    apply(cluster, users)
    apply(cluster, isvc("taken", metrics.port))
    cond = cluster.wait_until("OwnershipConflict True", lambda: (c := condition(cluster, "taken",
                                                                                 "OwnershipConflict"))
                              and c["status"] == "True" and c)
    assert cond["reason"] == "ObjectNotOwned" and f"Service {NS}/taken already exists" in cond["message"]
    event = cluster.wait_until("an ObjectNotOwned event", lambda: events(cluster, "taken", "ObjectNotOwned"))
    assert event[0]["type"] == "Warning" and f"Service {NS}/taken" in event[0]["message"]
    cluster.wait_until("the rest applied", lambda: cluster.run("kubectl", "-n", NS, "get", "deployment/taken-engine",
                                                               check=False).returncode == 0)
    live = cluster.get("-n", NS, "service", "taken")
    assert live["spec"]["selector"] == {"app": "theirs"} and "ownerReferences" not in live["metadata"]
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "taken")
    cluster.wait_until("its own objects collected", lambda: cluster.run(
        "kubectl", "-n", NS, "get", "deployment/taken-engine", check=False).returncode != 0, 90)
    assert cluster.get("-n", NS, "service", "taken")["spec"]["selector"] == {"app": "theirs"}  # still the user's
    cluster.kubectl("-n", NS, "delete", "service", "taken")


def models_page(*adapters: str) -> dict:
    """An engine's /v1/models (vLLM's shape: adapters name the base model as `parent`)."""
    base = "floodway/tiny-llama"
    return {"object": "list", "data": [{"id": base, "object": "model", "parent": None},
                                       *({"id": a, "object": "model", "parent": base} for a in adapters)]}


def test_a_bad_adapter_is_a_condition_and_an_event_while_the_base_model_serves(cluster, operator, metrics):
    """Every engine pod serves `fmt` but not `sql` (our engine's /debug/engine says why): status.adapters and the
    AdaptersReady condition, accepted by the API server as the CRD's status schema, name it; Ready stays True."""
    reason = "'/models/adapters/sql' has no adapter_config.json (a PEFT adapter folder has it)"
    metrics.pages = {"/v1/models": models_page("fmt"), "/debug/engine": {"failed_lora_adapters": [
        {"name": "sql", "path": "/models/adapters/sql", "reason": reason}]}}
    try:
        apply(cluster, isvc("lora", metrics.port, autoscaling={"intervalSeconds": 1},
                            adapters=[{"name": "fmt", "source": "adapters/fmt"},
                                      {"name": "sql", "source": "adapters/sql"}]))
        pod = cluster.wait_until("1 engine pod Running", lambda: (p := engine_pods(cluster, "lora", metrics))
                                 and p[0]["metadata"]["name"])
        cond = cluster.wait_until("AdaptersReady False", lambda: (c := condition(cluster, "lora", "AdaptersReady"))
                                  and c["status"] == "False" and c, 60)
        assert cond["reason"] == "AdapterLoadFailed" and "adapter 'sql'" in cond["message"] and reason in \
            cond["message"], cond
        st = cluster.wait_until("Ready", lambda: is_ready(s := status(cluster, "lora")) and s, 60)
        assert st["adapters"] == [{"replica": pod, "loaded": ["fmt"], "missing": [{"name": "sql", "reason": reason}]}]
        event = cluster.wait_until("an AdapterLoadFailed event", lambda: events(cluster, "lora", "AdapterLoadFailed"))
        assert event[0]["type"] == "Warning" and "adapter 'sql'" in event[0]["message"]

        metrics.pages = {"/v1/models": models_page("fmt", "sql")}  # loaded since (the engine's load endpoint)
        cluster.wait_until("AdaptersReady True", lambda: (c := condition(cluster, "lora", "AdaptersReady"))
                           and c["status"] == "True", 60)
        assert status(cluster, "lora")["adapters"] == [{"replica": pod, "loaded": ["fmt", "sql"]}]
    finally:
        metrics.pages = {}
    cluster.kubectl("-n", NS, "delete", "inferenceservice", "lora", "--wait=false")


class Metrics:
    """The test-controlled metrics source: Prometheus text on every engine pod's /metrics (one listener per pod
    IP; kwok hands them out from a loopback range) and on the gateway URL the operator is given."""

    def __init__(self, port: int):
        self.port, self.servers = port, {}
        self.pages: dict[str, dict] = {}  # more paths, answered with JSON: an engine's /v1/models, /debug/engine
        self.set(waiting=0, running=0)

    def set(self, waiting: float, running: float, requests: float = 0) -> None:
        """The engines' gauges, and the requests the gateway has counted (a counter: raising it is traffic)."""
        self.text = "".join(f"# TYPE vllm:{m} gauge\nvllm:{m}{{model_name=\"m\"}} {v}\n"
                            for m, v in (("num_requests_waiting", waiting), ("num_requests_running", running),
                                         ("kv_cache_usage_perc", 0.1))) + \
            ("# TYPE floodway_gateway_requests_total counter\n"
             f"floodway_gateway_requests_total{{backend=\"local\",outcome=\"ok\"}} {requests}\n")

    def serve(self, ip: str) -> None:
        if ip in self.servers:
            return
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                page = source.pages.get(self.path)
                body = source.text.encode() if self.path == "/metrics" else json.dumps(page).encode() if page else b""
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
