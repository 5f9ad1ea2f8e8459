"""The InferenceService CustomResourceDefinition, built from the spec and status models."""

from typing import Any

from floodway.operator.crdgen.schema import model_schema
from floodway.operator.spec import GROUP, KIND, PLURAL, VERSION, InferenceServiceSpec, InferenceServiceStatus
from floodway.operator.spec.resource import NAME_RULE

SHORT_NAME = "fwis"  # KServe already uses isvc
CRD_NAME = f"{PLURAL}.{GROUP}"
FILE_NAME = f"{CRD_NAME}.yaml"

PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas", "description": "Ready replicas"},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas",
     "description": "Replicas the autoscaler wants"},
    {"name": "Waiting", "type": "number", "jsonPath": ".status.observed.waiting", "description": "Queued requests"},
    {"name": "SLO", "type": "number", "jsonPath": ".status.observed.sloAttainment",
     "description": "Share of requests meeting the SLO"},
    {"name": "Overflow", "type": "number", "jsonPath": ".status.observed.overflowRate",
     "description": "Share of requests sent to the overflow API"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.lastScaleReason", "priority": 1},
    {"name": "URL", "type": "string", "jsonPath": ".status.url", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_crd() -> dict[str, Any]:
    spec_schema = model_schema(InferenceServiceSpec)
    status_schema = model_schema(InferenceServiceStatus)
    root = {
        "type": "object",
        "description": "A served LLM: engine replicas, an OpenAI-compatible gateway, autoscaling on queue depth "
                       "and SLO attainment, and overflow to an external API.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "required": ["spec"],
        "x-kubernetes-validations": [{"rule": NAME_RULE.cel, "message": NAME_RULE.message}],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "floodway"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower(),
                      "shortNames": [SHORT_NAME], "categories": ["floodway"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": root},
                "subresources": {"status": {}, "scale": {
                    # HPA, KEDA and `kubectl scale` set replicas.count; autoscaling.mode external follows it.
                    "specReplicasPath": ".spec.replicas.count",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": PRINTER_COLUMNS,
            }],
        },
    }
