"""Floodway as a user runs it, on the real node: the chart helm-installed with our locally built images (the
operator runs as a pod), an InferenceService whose model comes from a PersistentVolumeClaim (a local volume holding
the built-in tiny model's files), real engine pods turning Ready through their readiness probe, chat requests
through the gateway Service with the official `openai` client.

Stand-in, named: the external OpenAI-compatible API that overflow goes to is another real `floodway engine`
process on this machine (no external API is reachable here), listening on the bridge address pods reach.

Capacity is made scarce by configuration (maxNumSeqs 2 and the engine's --step-delay-ms), never by loading the
CPU, so the burst needs a second replica on any machine."""

import json
import shutil
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from floodway.operator.procs import free_port, start
from openai import OpenAI

pytestmark = pytest.mark.node

REPO = Path(__file__).resolve().parents[2]
NS = "floodway-node"
IS = "tiny"
SERVED = "tiny-llama"
STEP_DELAY_MS = 40  # each engine step takes >= 40 ms: a 32-token answer holds a slot for over a second


def ts(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def ready_since(pod: dict) -> float | None:
    """When the pod turned Ready (API time), or None while it is not."""
    for c in pod["status"].get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True":
            return ts(c["lastTransitionTime"])
    return None


def apply(cluster, *objs: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def engine_pods(cluster, name: str = IS) -> list[dict]:
    pods = cluster.get("-n", NS, "pods", "-l", f"app.kubernetes.io/instance={name},app.kubernetes.io/component=engine")
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def describe(cluster) -> str:
    """What the namespace looks like, for a failure message."""
    pods = cluster.kubectl("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
    events = cluster.kubectl("-n", NS, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout[-4000:]
    status = cluster.kubectl("-n", NS, "get", "inferenceservices", "-o", "jsonpath={.items[*].status}",
                             check=False).stdout[-3000:]
    operator = cluster.kubectl("-n", NS, "logs", "deployment/floodway", "--tail=40", check=False)
    return f"pods:\n{pods}\nevents:\n{events}\nstatus:\n{status}\noperator:\n{operator.stdout}{operator.stderr}"


def split_ref(ref: str) -> tuple[str, str]:
    repo, tag = ref.rsplit(":", 1)
    return repo, tag


@pytest.fixture(scope="module")
def overflow_stand_in(node_cluster, tiny_model_path, floodway_cmd, tmp_path_factory):
    """Stand-in for the external API: a real engine on the host, on the bridge address pods reach."""
    port = free_port()
    log = tmp_path_factory.mktemp("stand-in") / "overflow-engine.log"
    proc = start([*floodway_cmd, "engine", "--model", tiny_model_path, "--served-model-name", SERVED,
                  "--host", node_cluster.host_ip, "--port", str(port), "--max-model-len", "512"], port, "/ready",
                 300.0, log_path=str(log), host=node_cluster.host_ip)
    try:
        yield proc
    finally:
        proc.stop(grace_s=10.0)


@pytest.fixture(scope="module")
def floodway(node_cluster, floodway_images, tiny_model_path, overflow_stand_in):
    """The chart installed, the model on a local PersistentVolume, and the InferenceService Ready."""
    c = node_cluster.cluster
    c.kubectl("create", "namespace", NS)
    op_repo, op_tag = split_ref(floodway_images["operator"])
    engine_repo, engine_tag = split_ref(floodway_images["engine"])
    installed = time.monotonic()
    c.helm("install", "floodway", str(REPO / "charts" / "floodway"), "--namespace", NS, "--wait", "--timeout",
           "300s", "--set", f"image.repository={op_repo}", "--set", f"image.tag={op_tag}",
           "--set", "image.pullPolicy=Never", "--set", f"engineImage.repository={engine_repo}",
           "--set", f"engineImage.tag={engine_tag}", "--set", "workloadImagePullPolicy=Never",
           "--set", "leaderElection.leaseDurationSeconds=15", timeout_s=360)
    print(f"\nnode tier: helm install --wait took {time.monotonic() - installed:.1f} s (operator pod Ready)")

    # The model's files on a local volume of the real node, as a PersistentVolume bound to the service's claim.
    models = node_cluster.node.dir / "models"
    shutil.copytree(tiny_model_path, models / SERVED)
    for p in [models, *models.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)  # the engine runs as uid 1000
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "tiny-models"},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "local",
                   "persistentVolumeReclaimPolicy": "Retain", "local": {"path": str(models)},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                       "key": "kubernetes.io/hostname", "operator": "In", "values": [node_cluster.name]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": NS},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "local", "volumeName": "tiny-models",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    key = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "overflow-key", "namespace": NS},
           "stringData": {"key": "stand-in-has-no-auth"}}
    apply(c, pv, pvc, key)
    apply(c, inference_service(node_cluster, overflow_stand_in.port))
    created = time.monotonic()

    def pod_ready() -> dict | None:
        pods = engine_pods(c)
        return next((p for p in pods if ready_since(p)), None)

    try:
        pod = c.wait_until("an engine pod Ready", pod_ready, timeout_s=300, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    print(f"node tier: engine pod {pod['metadata']['name']} created to Ready (API times) "
          f"{ready_since(pod) - ts(pod['metadata']['creationTimestamp']):.0f} s; InferenceService applied to a "
          f"Ready engine {time.monotonic() - created:.1f} s")

    def gateway_serves() -> str | None:
        got = c.kubectl("-n", NS, "get", "service", IS, "-o", "jsonpath={.spec.clusterIP}", check=False)
        try:
            ok = got.returncode == 0 and httpx.get(f"http://{got.stdout}/v1/models", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            ok = False
        return got.stdout if ok else None

    try:
        gateway_ip = c.wait_until("the gateway Service answering", gateway_serves, timeout_s=180, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    return {"cluster": c, "gateway": f"http://{gateway_ip}/v1", "pod": pod}


def inference_service(node_cluster, stand_in_port: int, name: str = IS, **engine) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "model": SERVED,
                "storage": {"modelClaim": {"name": "models", "path": SERVED}},
                "engine": {"maxModelLen": 512, "maxNumSeqs": 2, "startupTimeoutSeconds": 300,
                           "terminationGracePeriodSeconds": 30,
                           "extraArgs": ["--step-delay-ms", str(STEP_DELAY_MS)], **engine},
                "resources": {"gpus": 0, "cpu": "200m", "memory": "1536Mi",
                              "nodeSelector": {"kubernetes.io/hostname": node_cluster.name}},
                "replicas": {"min": 1, "max": 2},
                "slo": {"ttftMs": 3000, "tpotMs": 500},
                # Short windows so that a burst of seconds scales up and its end scales down within the test.
                "autoscaling": {"intervalSeconds": 2, "targetConcurrency": 2, "scaleUpWindowSeconds": 4,
                                "panicHoldSeconds": 5, "scaleDownStabilizationSeconds": 10,
                                "scaleDownIntervalSeconds": 5},
                "overflow": {"enabled": True, "baseURL": f"http://{node_cluster.host_ip}:{stand_in_port}/v1",
                             "apiKeySecretRef": {"name": "overflow-key", "key": "key"},
                             "maxWaitingPerReplica": 1},
                "gateway": {"replicas": 1},
            }}


def chat(base_url: str, text: str, max_tokens: int = 16, stream: bool = False):
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120.0)
    return client.chat.completions.with_raw_response.create(
        model=SERVED, messages=[{"role": "user", "content": text}], max_tokens=max_tokens, temperature=0.0,
        stream=stream)


def test_chat_through_the_gateway_service(floodway):
    answers = []
    for text in ("Hello there", "What is a node?", "Count to three"):
        raw = chat(floodway["gateway"], text)
        completion = raw.parse()
        assert completion.model == SERVED
        assert completion.choices[0].message.content, completion
        assert completion.usage.completion_tokens > 0
        answers.append(raw.headers.get("x-floodway-backend"))
    # The gateway may overflow a request it predicts would miss the SLO; the real pod serves the rest.
    assert any(a.startswith(f"{IS}-engine-") for a in answers), answers

