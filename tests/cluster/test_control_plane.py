"""The control plane itself behaves like a cluster: CRDs with CEL validation, kwok GPU nodes, the scheduler
placing GPU pods (and refusing ones that cannot fit), the controller manager's Deployments and garbage collection."""

import json

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.floodway.io"},
    "spec": {
        "group": "test.floodway.io", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "description": "What the widget wants.",
                "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must be <= max"}],
                "properties": {"min": {"type": "integer", "default": 1}, "max": {"type": "integer"}}}}}}}]}}


def widget(name: str, **spec) -> str:
    return json.dumps({"apiVersion": "test.floodway.io/v1", "kind": "Widget", "metadata": {"name": name},
                       "spec": spec})


def pod(name: str, gpus: int) -> str:
    container = {"name": "main", "image": "floodway/none:0", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": [container]}})


def condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_crd_schema_defaults_and_cel_are_enforced(cluster):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    cluster.wait_established("widgets.test.floodway.io")
    cluster.kubectl("apply", "-f", "-", input=widget("ok", max=3))
    got = cluster.get("widget", "ok")
    assert got["spec"] == {"min": 1, "max": 3}  # the schema default was applied by the API server

    bad = cluster.kubectl("apply", "-f", "-", input=widget("bad", min=5, max=2), check=False)
    assert bad.returncode != 0 and "min must be <= max" in bad.stderr
    assert cluster.kubectl("get", "widget", "bad", check=False).returncode != 0
    explained = cluster.kubectl("explain", "widget.spec").stdout
    assert "What the widget wants." in explained


def test_kwok_nodes_are_ready_with_gpu_capacity(cluster):
    nodes = cluster.get("nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-node-0", "gpu-node-1"]
    for n in nodes:
        assert condition(n, "Ready") == "True"
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_gpu_pod_is_scheduled_and_runs_and_an_oversized_one_stays_pending(cluster):
    cluster.kubectl("apply", "-f", "-", input=pod("gpu-pod", 2))
    cluster.kubectl("apply", "-f", "-", input=pod("too-big", 5))  # no node has 5 GPUs
    running = cluster.wait_until("gpu-pod Running and Ready", lambda: (
        p := cluster.get("pod", "gpu-pod"))["status"].get("phase") == "Running" and condition(p, "Ready") == "True"
        and p)
    assert running["spec"]["nodeName"] in ("gpu-node-0", "gpu-node-1")
    assert running["status"].get("podIP")

    def unschedulable():
        events = cluster.get("events", "--field-selector", "involvedObject.name=too-big")["items"]
        return [e for e in events if e["reason"] == "FailedScheduling"]

    event = cluster.wait_until("a FailedScheduling event for too-big", unschedulable)[0]
    assert "nvidia.com/gpu" in event["message"]
    assert cluster.get("pod", "too-big")["status"]["phase"] == "Pending"
    cluster.kubectl("delete", "pod", "gpu-pod", "too-big", "--wait=true", "--timeout=60s")


def test_deployment_scales_and_garbage_collection_removes_what_it_owned(cluster):
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "floodway/none:0"}]}}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(deploy))

    def ready_replicas(n: int):
        return lambda: cluster.get("deployment", "web")["status"].get("readyReplicas", 0) == n

    cluster.wait_until("3 ready replicas", ready_replicas(3))
    cluster.kubectl("scale", "deployment/web", "--replicas=1")
    cluster.wait_until("1 pod left", lambda: len(cluster.get("pods", "-l", "app=web")["items"]) == 1)
    cluster.kubectl("delete", "deployment", "web", "--cascade=background")
    cluster.wait_until("ReplicaSets and pods collected", lambda: not cluster.get("rs,pods", "-l", "app=web")["items"])
