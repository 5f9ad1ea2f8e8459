"""The chart's RBAC, exercised with the operator's real ServiceAccount token (a TokenRequest, as its pod gets):
in a namespace it watches it can apply everything render() makes and the saved traffic history; elsewhere it can
create nothing, it reads no Secret anywhere, and it cannot grant more than it holds (no escalate/bind: the API
server refuses a binding to cluster-admin or a Role with rights it lacks). Each check is a real request, not
`kubectl auth can-i`."""

import json
from pathlib import Path

import pytest
from floodway.operator.autoscaler.history import History
from floodway.operator.controller.history_store import history_configmap
from floodway.operator.render import Images, Owner, render
from floodway.operator.spec.resource import parse

WATCHED = "serving"  # one of the test release's watchNamespaces (conftest.WATCHED_NAMESPACES)
UNWATCHED = ("kube-system", "default")
SA = ("floodway-system", "floodway")
CHART = Path(__file__).resolve().parents[2] / "charts" / "floodway"


@pytest.fixture(scope="module")
def as_operator(cluster, floodway_release):
    """kubectl as the operator's ServiceAccount: returns (exit code, stderr) of one request."""
    kubeconfig = str(cluster.service_account_kubeconfig(*SA))

    def run(*args: str, input: str | None = None) -> tuple[int, str]:
        done = cluster.kubectl("--kubeconfig", kubeconfig, *args, input=input, check=False)
        return done.returncode, done.stderr

    return run


def forbidden(result: tuple[int, str]) -> bool:
    code, err = result
    return code != 0 and "forbidden" in err.lower()


def doc(obj: dict) -> str:
    return json.dumps(obj)


def pod(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-probe", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def deployment(namespace: str) -> dict:
    labels = {"app": "rbac-probe"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rbac-probe", "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod(namespace)["spec"]}}}


def binding(namespace: str, role_kind: str, role: str) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"rbac-probe-{role}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]}


def test_it_applies_everything_render_makes_in_a_watched_namespace(cluster, as_operator):
    """Server-side apply of every rendered object and of the history's ConfigMap, as the operator does it (the
    gateway's Role and RoleBinding included: the API server lets it grant those because it holds the same rights
    there)."""
    isvc = {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "rbac-probe", "namespace": WATCHED},
            "spec": {"model": "floodway/tiny-llama", "resources": {"gpus": 1}, "replicas": {"min": 1, "max": 1}}}
    cluster.kubectl("apply", "-f", "-", input=doc(isvc))
    try:
        live = cluster.get("-n", WATCHED, "inferenceservice", "rbac-probe")
        owner = Owner("rbac-probe", WATCHED, live["metadata"]["uid"])
        objs = [*render(parse(live).spec, owner, Images.from_env({})), history_configmap(owner, History())]
        for obj in objs:
            code, err = as_operator("apply", "--server-side", "--force-conflicts",
                                    "--field-manager=floodway-operator", "-f", "-", input=doc(obj))
            assert code == 0, f"{obj['kind']}/{obj['metadata']['name']}: {err}"
        code, err = as_operator("-n", WATCHED, "get", "pods,endpointslices.discovery.k8s.io,inferenceservices")
        assert code == 0, err
        code, err = as_operator("-n", WATCHED, "get", "configmap", "rbac-probe-history")  # read back after a restart
        assert code == 0, err
        # ...and the very same objects nowhere else
        for obj in objs:
            for ns in UNWATCHED:
                moved = {**obj, "metadata": {**obj["metadata"], "namespace": ns, "ownerReferences": []}}
                assert forbidden(as_operator("apply", "--server-side", "-f", "-", input=doc(moved))), (obj, ns)
    finally:
        cluster.kubectl("-n", WATCHED, "delete", "inferenceservice", "rbac-probe", "--wait=false")


@pytest.mark.parametrize("namespace", UNWATCHED)
def test_it_cannot_create_pods_or_deployments_outside_its_namespaces(as_operator, namespace):
    assert forbidden(as_operator("create", "-f", "-", input=doc(pod(namespace))))
    assert forbidden(as_operator("create", "-f", "-", input=doc(deployment(namespace))))
    assert forbidden(as_operator("-n", namespace, "get", "deployments"))


def test_it_cannot_act_cluster_wide(as_operator):
    assert forbidden(as_operator("get", "pods", "--all-namespaces"))
    assert forbidden(as_operator("get", "deployments", "--all-namespaces"))
    assert forbidden(as_operator("get", "namespaces"))
    assert forbidden(as_operator("get", "clusterrolebindings"))
    assert forbidden(as_operator("create", "namespace", "rbac-probe"))


def test_it_has_nothing_cluster_scoped(cluster, floodway_release):
    subject = {"kind": "ServiceAccount", "name": SA[1], "namespace": SA[0]}
    bound = [b["metadata"]["name"] for b in cluster.get("clusterrolebindings")["items"]
             if subject in (b.get("subjects") or [])]
    assert bound == []


@pytest.mark.parametrize("namespace", [WATCHED, "floodway-system", *UNWATCHED])
def test_it_cannot_read_secrets_anywhere(cluster, as_operator, namespace):
    cluster.kubectl("-n", namespace, "create", "secret", "generic", "rbac-probe", "--from-literal=k=v",
                    check=False)  # something to read (may exist from a parameter before)
    assert forbidden(as_operator("-n", namespace, "get", "secret", "rbac-probe"))
    assert forbidden(as_operator("-n", namespace, "get", "secrets"))
    assert forbidden(as_operator("-n", namespace, "get", "secrets", "--watch", "--request-timeout=5s"))


def test_it_cannot_read_secrets_cluster_wide(as_operator):
    assert forbidden(as_operator("get", "secrets", "--all-namespaces"))


@pytest.mark.parametrize("role", ["cluster-admin", "admin", "edit"])
def test_it_cannot_bind_a_role_beyond_its_own(cluster, as_operator, role):
    """Even in a namespace it manages: each of these grants rights its Role lacks (Secrets among them)."""
    # admin and edit get their rules by aggregation (kube-controller-manager); empty, binding them grants nothing
    cluster.wait_until(f"ClusterRole {role} has rules", lambda: cluster.get("clusterrole", role).get("rules"))
    assert forbidden(as_operator("create", "-f", "-", input=doc(binding(WATCHED, "ClusterRole", role))))


def test_it_cannot_write_a_role_with_rights_it_lacks(as_operator):
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "rbac-probe-secrets", "namespace": WATCHED},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    assert forbidden(as_operator("create", "-f", "-", input=doc(role)))
    role["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    assert forbidden(as_operator("create", "-f", "-", input=doc(role)))
    cluster_binding = {**binding(WATCHED, "ClusterRole", "cluster-admin"), "kind": "ClusterRoleBinding"}
    del cluster_binding["metadata"]["namespace"]
    assert forbidden(as_operator("create", "-f", "-", input=doc(cluster_binding)))


@pytest.mark.parametrize("verb, resource", [("escalate", "roles"), ("escalate", "clusterroles"), ("bind", "roles"),
                                            ("bind", "clusterroles"), ("impersonate", "serviceaccounts"),
                                            ("impersonate", "users"), ("create", "pods --subresource=exec"),
                                            ("create", "serviceaccounts --subresource=token")])
def test_it_holds_no_escalation_verbs(cluster, floodway_release, verb, resource):
    answer = cluster.kubectl("auth", "can-i", verb, *resource.split(), "-n", WATCHED,
                             "--as", f"system:serviceaccount:{SA[0]}:{SA[1]}", check=False).stdout.strip()
    assert answer == "no"


def test_it_cannot_mint_tokens_for_other_service_accounts(as_operator):
    """A token of a ServiceAccount it can create would be a way around its own limits."""
    for ns, name in ((WATCHED, "default"), ("kube-system", "default"), SA):
        assert forbidden(as_operator("-n", ns, "create", "token", name)), (ns, name)


def test_cluster_wide_is_a_choice_that_still_reads_no_secrets(cluster, floodway_crd):
    """clusterWide: true (a second release): a ClusterRole lets it act in any namespace, with the same limits."""
    release, ns = "wide", "floodway-wide"
    cluster.helm("install", release, str(CHART), "--namespace", ns, "--create-namespace", "--set", "clusterWide=true",
                 "--set", "networkPolicy.enabled=false", timeout_s=180)
    try:
        kubeconfig = str(cluster.service_account_kubeconfig(ns, f"{release}-floodway"))

        def as_wide(*args: str, input: str | None = None) -> tuple[int, str]:
            done = cluster.kubectl("--kubeconfig", kubeconfig, *args, input=input, check=False)
            return done.returncode, done.stderr

        code, err = as_wide("create", "-f", "-", "--dry-run=server", input=doc(deployment("default")))
        assert code == 0, err
        assert as_wide("get", "inferenceservices", "--all-namespaces")[0] == 0
        assert as_wide("get", "customresourcedefinitions")[0] == 0  # kopf watches the CRDs cluster-wide
        assert forbidden(as_wide("get", "secrets", "--all-namespaces"))
        assert forbidden(as_wide("create", "-f", "-", input=doc(pod("kube-system"))))  # no pods, anywhere
        assert forbidden(as_wide("create", "-f", "-", input=doc(binding("default", "ClusterRole", "cluster-admin"))))
    finally:
        cluster.helm("uninstall", release, "--namespace", ns, timeout_s=180)
