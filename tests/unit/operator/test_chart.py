"""`helm lint` and `helm template` of charts/floodway, and the rendered manifests (chart and operator output)
against the Kubernetes OpenAPI schemas."""

import json
import re
import subprocess

import pytest
import yaml
from floodway.operator.controller.kube import PLURALS
from floodway.operator.crdgen.files import REPO_ROOT
from floodway.operator.gateway.metrics import MARGIN_BOUND, GatewayMetrics
from floodway.operator.render import Images, Owner, render
from floodway.operator.spec import InferenceServiceSpec

CHART = REPO_ROOT / "charts" / "floodway"
K8S_VERSION = "1.31.0"
NOT_IN_K8S = {"ServiceMonitor"}  # a Prometheus Operator kind


def k8s_validate(objs: list[dict]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extra)")
    for obj in objs:
        if obj["kind"] not in NOT_IN_K8S:
            kv.validate(obj, K8S_VERSION, strict=True)


def helm_run(helm: str, *args: str) -> str:
    out = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def template(helm: str, *sets: str) -> list[dict]:
    args = ["template", "fw", str(CHART), "--namespace", "floodway-system", "--include-crds"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm_run(helm, *args)) if d]


def test_helm_lint(helm):
    helm_run(helm, "lint", str(CHART), "--strict")


@pytest.mark.parametrize("sets", [(), ("watchNamespaces={team-a,team-b}", "replicaCount=2"),
                                  ("metrics.serviceMonitor.enabled=true", "grafanaDashboard.enabled=true",
                                   "leaderElection.enabled=false")])
def test_helm_template_validates(helm, sets):
    objs = template(helm, *sets)
    k8s_validate(objs)
    kinds = [o["kind"] for o in objs]
    assert "CustomResourceDefinition" in kinds and "Deployment" in kinds and "ServiceAccount" in kinds
    for o in objs:
        if o["kind"] != "CustomResourceDefinition":
            assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "floodway"


def test_rbac_is_least_privilege(helm):
    for sets in [(), ("watchNamespaces={team-a}",), ("clusterWide=true",)]:
        roles = [o for o in template(helm, *sets) if o["kind"] in ("ClusterRole", "Role")]
        assert roles
        for role in roles:
            for rule in role["rules"]:
                assert "secrets" not in rule["resources"], rule
                assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    bindings = [o for o in template(helm) if o["kind"].endswith("Binding")]
    assert all(b["roleRef"]["name"] != "cluster-admin" for b in bindings)


def where_granted(objs: list[dict]) -> dict[str, set[str]]:
    """RBAC object kind -> the namespaces it is in ("" for cluster-scoped)."""
    out: dict[str, set[str]] = {}
    for o in objs:
        if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
            out.setdefault(o["kind"], set()).add(o["metadata"].get("namespace", ""))
    return out


def operator_args(objs: list[dict]) -> list[str]:
    dep = next(o for o in objs if o["kind"] == "Deployment")
    return [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if "namespace" in a]


def test_rbac_is_namespaced_unless_cluster_wide_is_asked_for(helm):
    default = template(helm)
    assert where_granted(default) == {"Role": {"floodway-system"}, "RoleBinding": {"floodway-system"}}
    assert operator_args(default) == ["--lease-namespace=floodway-system", "--namespace=floodway-system"]
    teams = template(helm, "watchNamespaces={team-a,team-b}")
    assert where_granted(teams) == {"Role": {"team-a", "team-b", "floodway-system"},  # + the Lease's Role
                                    "RoleBinding": {"team-a", "team-b", "floodway-system"}}
    assert operator_args(teams)[1:] == ["--namespace=team-a", "--namespace=team-b"]
    wide = template(helm, "clusterWide=true")
    assert where_granted(wide)["ClusterRole"] == {""} and where_granted(wide)["Role"] == {"floodway-system"}
    assert operator_args(wide)[1:] == ["--all-namespaces"]
    crd_read = [r for o in default + teams if o["kind"] == "Role" for r in o["rules"]
                if "customresourcedefinitions" in r["resources"]]
    assert not crd_read  # the namespaced operator reads no cluster-scoped object


def test_cluster_wide_excludes_a_namespace_list(helm):
    out = subprocess.run([helm, "template", "fw", str(CHART), "--set", "clusterWide=true", "--set",
                          "watchNamespaces={team-a}"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "leave watchNamespaces empty" in out.stderr
    out = subprocess.run([helm, "template", "fw", str(CHART), "--set", "watchNamespaces={team_a}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "watchNamespaces" in out.stderr


def test_operator_rbac_covers_what_it_renders(helm):
    granted = {(g, r) for o in template(helm) if o["kind"] == "Role" for rule in o["rules"]
               for g in rule["apiGroups"] for r in rule["resources"] if "create" in rule["verbs"]}
    spec = InferenceServiceSpec(model="m")
    for obj in render(spec, Owner("a", "b", "u"), Images()):
        group = obj["apiVersion"].rpartition("/")[0]
        assert (group, PLURALS[obj["kind"]]) in granted, obj["kind"]


def test_operator_may_read_what_it_checks_but_no_secret(helm):
    # Claims are read (StorageAvailable); Secrets never: a missing one shows in the pods' waiting reasons.
    reads = {(g, r) for o in template(helm) if o["kind"] == "Role" for rule in o["rules"]
             for g in rule["apiGroups"] for r in rule["resources"] if {"get", "list"} <= set(rule["verbs"])}
    assert {("", "persistentvolumeclaims"), ("", "pods"), ("networking.k8s.io", "networkpolicies")} <= reads
    assert not any(r == "secrets" for _, r in reads)


def test_operator_deployment_is_hardened(helm):
    dep = next(o for o in template(helm) if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["command"] == ["floodway", "operator"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLOODWAY_ENGINE_IMAGE"] == "floodway/engine:0.1.0"


def test_values_schema_rejects_bad_values(helm):
    out = subprocess.run([helm, "template", "fw", str(CHART), "--set", "replicaCount=-1"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "replicaCount" in out.stderr
    out = subprocess.run([helm, "template", "fw", str(CHART), "--set", "unknownKey=1"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0
    out = subprocess.run([helm, "template", "fw", str(CHART), "--set", "replicaCount=2", "--set",
                          "leaderElection.enabled=false"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "leaderElection" in out.stderr


def test_chart_crd_is_the_generated_one(helm):
    crd = next(o for o in template(helm) if o["kind"] == "CustomResourceDefinition")
    generated = yaml.safe_load((REPO_ROOT / "crds" / "inferenceservices.serving.floodway.io.yaml").read_text())
    assert crd == generated


def test_dashboard_is_valid_json():
    dash = json.loads((CHART / "dashboards" / "floodway.json").read_text())
    assert dash["uid"] == "floodway-overview" and len(dash["panels"]) >= 6


def test_dashboard_queries_only_what_the_gateway_exports():
    exprs = " ".join(t["expr"] for p in json.loads((CHART / "dashboards" / "floodway.json").read_text())["panels"]
                     for t in p["targets"])
    families = set(re.findall(r"^# TYPE (\S+)", GatewayMetrics().render().decode(), re.M))
    queried = set(re.findall(r"floodway_gateway_\w+", exprs))
    assert queried and all({q, re.sub(r"_(bucket|count|sum)$", "", q)} & families for q in queried), queried
    assert f'le="{MARGIN_BOUND:g}"' in exprs  # a bucket bound the histogram has


@pytest.mark.parametrize("kw", [{}, {"engine": {"runtime": "vllm"}, "resources": {"gpus": 2, "tolerations": [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
    {"overflow": {"enabled": True, "baseURL": "https://x/v1", "apiKeySecretRef": {"name": "k", "key": "v"}},
     "resources": {"gpus": 0, "cpu": "500m", "memory": "1Gi"}}])
def test_operator_output_validates(kw):
    k8s_validate(render(InferenceServiceSpec.model_validate({"model": "m", **kw}), Owner("a", "b", "u"), Images()))
