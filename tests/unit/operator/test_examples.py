"""The chart's examples: every InferenceService parses with the CRD's rules, and the external-autoscaling
objects (HPA, KEDA ScaledObject) target a service in external mode with bounds inside its own and the per-pod
target its own autoscaler would use."""

import pytest
import yaml
from floodway.operator.controller.scaling import autoscaler_policy
from floodway.operator.crdgen.files import REPO_ROOT
from floodway.operator.spec import load

EXAMPLES = REPO_ROOT / "charts" / "floodway" / "examples"


def test_every_example_service_parses():
    services = sorted(EXAMPLES.glob("*.yaml"))
    assert len(services) >= 5
    for path in services:
        load(path)


@pytest.mark.parametrize("name, lo, hi", [("hpa.yaml", "minReplicas", "maxReplicas"),
                                          ("keda-scaledobject.yaml", "minReplicaCount", "maxReplicaCount")])
def test_external_scalers_target_a_service_in_external_mode(name, lo, hi):
    obj = yaml.safe_load((EXAMPLES / "external-autoscaling" / name).read_text())
    ref = obj["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"]) == ("serving.floodway.io/v1alpha1", "InferenceService")
    service = load(EXAMPLES / f"{ref['name'].removeprefix('chat-')}.yaml")
    assert service.metadata.name == ref["name"] and service.spec.autoscaling.mode == "external"
    assert service.spec.replicas.min <= obj["spec"][lo] <= obj["spec"][hi] <= service.spec.replicas.max
    # One replica per the requests in flight the service's own autoscaler would size it for.
    per_pod = obj["spec"]["metrics"][0]["pods"]["target"]["averageValue"] if obj["kind"] == "HorizontalPodAutoscaler" \
        else obj["spec"]["triggers"][0]["metadata"]["threshold"]
    assert float(per_pod) == autoscaler_policy(service.spec).target_concurrency
    if obj["kind"] == "HorizontalPodAutoscaler":
        kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extra)")
        kv.validate(obj, "1.31.0", strict=True)
