"""`helm install` of charts/floodway into the real control plane: the operator Deployment becomes available
(kwok runs its pod). What its RBAC allows and refuses: test_rbac.py."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def test_the_e2e_image_values_reach_the_operator(cluster):
    """The --set flags e2e/lib.sh passes name the images the operator deploys."""
    out = cluster.helm("template", "floodway", str(REPO / "charts" / "floodway"), "--set",
                       "image.repository=floodway/operator", "--set", "image.tag=e2e", "--set",
                       "engineImage.repository=floodway/engine-cpu", "--set", "engineImage.tag=e2e").stdout
    assert "image: \"floodway/operator:e2e\"" in out
    assert "value: \"floodway/engine-cpu:e2e\"" in out
