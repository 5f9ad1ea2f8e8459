"""Floodway installed on the real node as a user installs it, shared by the node tier's modules: the chart
helm-installed with our locally built images (the operator runs as a pod), and the trained SmolLM2-135M-Instruct on
a local PersistentVolume bound to the claim `models` (the very folder the engine's own GGUF conversion wrote into
the Floodway cache on the host). conftest.py loads this module and installs it once per session (the fixture
`floodway_chart`); test modules import its helpers by the name conftest gives it, `floodway_tests_chart`
(pytest's importlib mode puts no test folder on sys.path)."""

import json
import time
from datetime import datetime
from pathlib import Path

NS = "floodway-node"
SERVED = "smollm2-135m-instruct"
MODEL_CLAIM = "models"


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


def pods(cluster, name: str, component: str) -> list[dict]:
    """The InferenceService `name`'s pods of one component (engine, gateway), less those being deleted."""
    found = cluster.get("-n", NS, "pods", "-l",
                        f"app.kubernetes.io/instance={name},app.kubernetes.io/component={component}")
    return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]


def engine_pods(cluster, name: str) -> list[dict]:
    return pods(cluster, name, "engine")


def describe(cluster) -> str:
    """What the namespace looks like, for a failure message."""
    found = cluster.kubectl("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
    events = cluster.kubectl("-n", NS, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout[-4000:]
    status = cluster.kubectl("-n", NS, "get", "inferenceservices", "-o", "jsonpath={.items[*].status}",
                             check=False).stdout[-3000:]
    operator = cluster.kubectl("-n", NS, "logs", "deployment/floodway", "--tail=40", check=False)
    return f"pods:\n{found}\nevents:\n{events}\nstatus:\n{status}\noperator:\n{operator.stdout}{operator.stderr}"


def split_ref(ref: str) -> tuple[str, str]:
    repo, tag = ref.rsplit(":", 1)
    return repo, tag


def install(cluster, repo: Path, images: dict[str, str], model_folder: Path, node_name: str) -> None:
    """The chart in NS (waited for until the operator pod is Ready), and the model folder as a local
    PersistentVolume of the real node (read-only; its files are readable by the engine's uid 1000) bound to
    the claim MODEL_CLAIM."""
    cluster.kubectl("create", "namespace", NS)
    op_repo, op_tag = split_ref(images["operator"])
    engine_repo, engine_tag = split_ref(images["engine"])
    installed = time.monotonic()
    cluster.helm("install", "floodway", str(repo / "charts" / "floodway"), "--namespace", NS, "--wait", "--timeout",
                 "300s", "--set", f"image.repository={op_repo}", "--set", f"image.tag={op_tag}",
                 "--set", "image.pullPolicy=Never", "--set", f"engineImage.repository={engine_repo}",
                 "--set", f"engineImage.tag={engine_tag}", "--set", "workloadImagePullPolicy=Never",
                 "--set", "leaderElection.leaseDurationSeconds=15", timeout_s=360)
    print(f"\nnode tier: helm install --wait took {time.monotonic() - installed:.1f} s (operator pod Ready)")
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "smollm2-model"},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "local",
                   "persistentVolumeReclaimPolicy": "Retain", "local": {"path": str(model_folder)},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                       "key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": MODEL_CLAIM, "namespace": NS},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "local", "volumeName": "smollm2-model",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    apply(cluster, pv, pvc)
