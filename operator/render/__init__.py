"""Pure rendering: an InferenceService spec in, the Kubernetes objects that serve it out."""

from floodway.operator.render.engine import engine_deployment, engine_pdb, engine_service
from floodway.operator.render.gateway import (
    gateway_configmap,
    gateway_deployment,
    gateway_rbac,
    gateway_service,
    service_url,
)
from floodway.operator.render.images import Images
from floodway.operator.render.meta import Owner
from floodway.operator.spec import InferenceServiceSpec

__all__ = ["Images", "Owner", "clamp_replicas", "render", "service_url"]


def clamp_replicas(spec: InferenceServiceSpec, replicas: int | None) -> int:
    """The engine replica count to apply: the autoscaler's last wish within the spec's bounds (min at first)."""
    if replicas is None or not spec.autoscaling.enabled:
        return spec.replicas.min
    return max(spec.replicas.min, min(spec.replicas.max, replicas))


def render(spec: InferenceServiceSpec, owner: Owner, images: Images, replicas: int | None = None) -> list[dict]:
    """Every object of one InferenceService, in apply order (config and RBAC before the pods that use them)."""
    return [
        *gateway_rbac(spec, owner, images),
        gateway_configmap(spec, owner, images),
        engine_service(spec, owner, images),
        engine_deployment(spec, owner, images, clamp_replicas(spec, replicas)),
        engine_pdb(spec, owner, images),
        gateway_deployment(spec, owner, images),
        gateway_service(spec, owner, images),
    ]
