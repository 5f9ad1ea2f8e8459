"""checkov's Kubernetes checks over what users get: the chart rendered by helm (namespaced and cluster-wide with
every option on) and the operator's objects for each example InferenceService. A finding fails the test unless
SKIPS names it with its reason, and a skip that no longer matches a finding fails too, so SKIPS stays the
whole truth. checkov comes from PyPI into a venv of its own on first use (its pins conflict with ours).
Schema validity of the same objects is checked by kubernetes-validate in test_chart.py."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from floodway.operator.crdgen.files import REPO_ROOT
from floodway.operator.render import Images, Owner, render
from floodway.operator.spec.resource import load
from floodway.operator.toolvenv import CACHE, ensure_tool

CHECKOV = "checkov==3.3.30"
CHART = REPO_ROOT / "charts" / "floodway"

# (check, component) -> why it does not apply. Components: operator (the chart's objects), engine, gateway; "*": all.
SKIPS = {
    ("CKV_K8S_11", "*"): "no CPU limits on purpose: CFS throttling stalls token streams; CPU is requested",
    ("CKV_K8S_15", "*"): "IfNotPresent with immutable version tags; Always breaks preloaded and air-gapped nodes",
    ("CKV_K8S_43", "*"): "images are pinned by version tag; a digest is the installer's choice (tag takes @sha256:)",
    ("CKV_K8S_40", "*"): "UID 1000 is the images' own user; non-root, no escalation, no capabilities, no host mounts",
    ("CKV_K8S_38", "operator"): "the ServiceAccount token is the operator's API credential",
    ("CKV_K8S_38", "gateway"): "the gateway's token lets it watch its engines' EndpointSlices (its Role's only right)",
    ("CKV_K8S_13", "engine"): "spec.resources.memory sets the engine's memory limit; unset, the model gets the node's",
    ("CKV_K8S_35", "*"): "HF_TOKEN and the overflow key come by secretKeyRef into env vars, as the libraries read them",
    ("CKV2_K8S_6", "gateway"): "the gateway is the service's front door: clients anywhere in the cluster call it",
}

# A deliberately bad object, scanned with the rest: the run must flag it, or the lint proves nothing.
CONTROL = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lint-control", "namespace": "lint"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1", "securityContext": {"privileged": True}}]}}
PRIVILEGED = "CKV_K8S_16"


def component(resource: str) -> str:
    """checkov names resources Kind.namespace.name[.labels]; ours end in -engine or -gateway."""
    parts = resource.split(".")
    name = parts[2] if len(parts) > 2 else parts[-1]
    return next((c for c in ("engine", "gateway") if name.endswith("-" + c)), "operator")


def rendered(helm: str) -> dict[str, list[dict]]:
    """file name -> the objects in it."""
    files = {}
    every_option = ("clusterWide=true", "replicaCount=2", "metrics.serviceMonitor.enabled=true",
                    "grafanaDashboard.enabled=true")
    for label, sets in (("chart-namespaced", ()), ("chart-cluster-wide", every_option)):
        args = [helm, "template", "fw", str(CHART), "--namespace", "floodway-system"]
        for s in sets:
            args += ["--set", s]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        files[label] = [d for d in yaml.safe_load_all(out.stdout) if d]
    for example in sorted((CHART / "examples").glob("*.yaml")):
        isvc = load(example)
        owner = Owner(isvc.metadata.name, "serving", "uid")  # the examples leave it to kubectl's context
        files[f"operator-{example.stem}"] = render(isvc.spec, owner, Images())
    return files


@pytest.fixture(scope="session")
def checkov() -> str:
    return ensure_tool(CACHE / "venv-checkov", CHECKOV, "checkov")


def scan(checkov: str, folder: Path) -> dict:
    env = {**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "PYTHONSAFEPATH": "1"}
    out = subprocess.run([checkov, "-d", str(folder), "--framework", "kubernetes", "-o", "json", "--quiet",
                          "--skip-download", "--soft-fail"], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_checkov_finds_nothing_new(helm, checkov, tmp_path):
    files = rendered(helm)
    assert files["operator-chat-gpu"], "an example rendered nothing"
    for label, objs in {**files, "control": [CONTROL]}.items():
        (tmp_path / f"{label}.yaml").write_text(yaml.safe_dump_all(objs))
    report = scan(checkov, tmp_path)
    summary = report["summary"]
    assert summary["parsing_errors"] == 0 and summary["resource_count"] >= sum(map(len, files.values())) // 2, summary
    failed = report["results"]["failed_checks"]
    assert any(f["check_id"] == PRIVILEGED for f in failed if f["file_path"] == "/control.yaml"), \
        "checkov did not flag a privileged pod: the scan is not working"

    used, new = set(), []
    for f in failed:
        if f["file_path"] == "/control.yaml":
            continue
        key = next((k for k in ((f["check_id"], component(f["resource"])), (f["check_id"], "*")) if k in SKIPS), None)
        if key:
            used.add(key)
        else:
            new.append(f"{f['check_id']} {f['resource'].split('.app.')[0]} in {f['file_path']}: {f['check_name']}")
    assert not new, "new checkov findings: fix them, or add (check, component) to SKIPS with a one-line reason:\n" \
        + "\n".join(sorted(set(new)))
    assert used == set(SKIPS), f"skips that match no finding any more (remove them): {set(SKIPS) - used}"


@pytest.mark.parametrize("resource, expected", [
    ("Deployment.b.chat-engine", "engine"), ("Pod.b.chat-gateway.app.kubernetes.io/name-floodway", "gateway"),
    ("Deployment.floodway-system.fw-floodway", "operator"), ("ClusterRole.fw-floodway", "operator")])
def test_component(resource, expected):
    assert component(resource) == expected
