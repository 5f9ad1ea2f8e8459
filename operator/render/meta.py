"""Names, labels and owner references shared by every rendered object."""

from dataclasses import dataclass

from floodway.operator.spec import API_VERSION, KIND, InferenceServiceSpec

PART_OF = "floodway"
MANAGER = "floodway-operator"
SERVICE_LABEL = "serving.floodway.io/inference-service"


@dataclass(frozen=True)
class Owner:
    """The InferenceService that owns the rendered objects (uid None: no owner reference, e.g. a dry run)."""

    name: str
    namespace: str
    uid: str | None = None


def engine_name(owner: Owner) -> str:
    return f"{owner.name}-engine"


def gateway_name(owner: Owner) -> str:
    return f"{owner.name}-gateway"


def selector(owner: Owner, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": PART_OF, "app.kubernetes.io/instance": owner.name,
            "app.kubernetes.io/component": component}


def labels(owner: Owner, component: str, version: str) -> dict[str, str]:
    return {**selector(owner, component), "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/managed-by": MANAGER, "app.kubernetes.io/version": version,
            SERVICE_LABEL: owner.name}


def selector_string(owner: Owner, component: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector(owner, component).items())


def metadata(owner: Owner, name: str, component: str, version: str) -> dict:
    meta = {"name": name, "namespace": owner.namespace, "labels": labels(owner, component, version)}
    if owner.uid:
        # Deleting the InferenceService garbage-collects everything it owns.
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": KIND, "name": owner.name, "uid": owner.uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return meta


def image_version(image: str) -> str:
    tag = image.rsplit("/", 1)[-1].partition(":")[2].partition("@")[0]
    return (tag or "latest")[:63]


def spread(owner: Owner, component: str) -> list[dict]:
    """Replicas of one component spread over nodes where they can be (soft: a one-node pool still schedules);
    pod-template-hash keeps a rollout's old pods out of the count."""
    return [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": selector(owner, component)}, "matchLabelKeys": ["pod-template-hash"]}]


def pull_secrets(spec: InferenceServiceSpec) -> list[dict] | None:
    return [{"name": n} for n in spec.image_pull_secrets] or None
