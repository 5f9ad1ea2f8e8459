"""`helm install` of charts/floodway into the real control plane: the operator Deployment becomes available
(kwok runs its pod), and the chart's RBAC gives the operator's ServiceAccount what reconciling needs and no
access to Secrets."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SA = "system:serviceaccount:floodway-system:floodway"


def can(cluster, *args: str) -> bool:
    answer = cluster.kubectl("auth", "can-i", "--as", SA, *args, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


def test_helm_install_makes_the_operator_available(cluster, floodway_release):
    status = cluster.helm("status", floodway_release, "-n", "floodway-system", "-o", "json").stdout
    assert '"status":"deployed"' in status.replace(" ", "")
    deploy = cluster.get("-n", "floodway-system", "deployment", "floodway")
    assert deploy["status"].get("availableReplicas") == 1
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["floodway", "operator"]
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "floodway"
    crd = cluster.get("crd", "inferenceservices.serving.floodway.io")
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])


@pytest.mark.parametrize("verb, resource", [
    ("patch", "deployments.apps"), ("create", "deployments.apps"), ("delete", "services"),
    ("create", "configmaps"), ("watch", "inferenceservices.serving.floodway.io"),
    ("patch", "inferenceservices.serving.floodway.io/status"), ("create", "events"), ("list", "pods"),
])
def test_operator_service_account_can_reconcile(cluster, floodway_release, verb, resource):
    assert can(cluster, verb, resource, "-n", "default")


@pytest.mark.parametrize("verb", ["get", "list", "watch"])
def test_operator_service_account_cannot_read_secrets(cluster, floodway_release, verb):
    assert not can(cluster, verb, "secrets", "-n", "default")
    assert not can(cluster, verb, "secrets", "-n", "floodway-system")
    assert not can(cluster, verb, "secrets", "--all-namespaces")


def test_the_e2e_image_values_reach_the_operator(cluster):
    """The --set flags e2e/lib.sh passes name the images the operator deploys."""
    out = cluster.helm("template", "floodway", str(REPO / "charts" / "floodway"), "--set",
                       "image.repository=floodway/operator", "--set", "image.tag=e2e", "--set",
                       "engineImage.repository=floodway/engine-cpu", "--set", "engineImage.tag=e2e").stdout
    assert "image: \"floodway/operator:e2e\"" in out
    assert "value: \"floodway/engine-cpu:e2e\"" in out
