"""Pure rendering: an InferenceService spec in, the Kubernetes objects that serve it out."""

from floodway.operator.render.engine import engine_deployment, engine_pdb, engine_service
from floodway.operator.render.gateway import (
    gateway_configmap,
    gateway_deployment,
    gateway_pdb,
    gateway_rbac,
    gateway_service,
    service_url,
)
from floodway.operator.render.images import Images
from floodway.operator.render.meta import Owner
from floodway.operator.render.network import engine_network_policy
from floodway.operator.spec import InferenceServiceSpec

__all__ = ["Images", "Owner", "clamp_replicas", "render", "service_url"]


def clamp_replicas(spec: InferenceServiceSpec, replicas: int | None) -> int:
    """The engine replica count to apply: with autoscaling off, replicas.min; with mode external, replicas.count
    (HPA or KEDA set it); else the autoscaler's last wish (min at first). Always within min and max."""
    if not spec.autoscaling.enabled:
        return spec.replicas.min
    if spec.autoscaling.mode == "external":
        return spec.replicas.clamp(spec.replicas.count)
    return spec.replicas.clamp(spec.replicas.min if replicas is None else replicas)


def render(spec: InferenceServiceSpec, owner: Owner, images: Images, replicas: int | None = None,
           operator_namespace: str | None = None) -> list[dict]:
    """Every object of one InferenceService, in apply order (config, RBAC and policy before the pods that use
    them). operator_namespace: where the operator runs, the only namespace whose pods may scrape the engines."""
    return [
        *gateway_rbac(spec, owner, images),
        gateway_configmap(spec, owner, images),
        *engine_network_policy(spec, owner, images, operator_namespace),
        engine_service(spec, owner, images),
        engine_deployment(spec, owner, images, clamp_replicas(spec, replicas)),
        engine_pdb(spec, owner, images),
        gateway_deployment(spec, owner, images),
        *gateway_pdb(spec, owner, images),
        gateway_service(spec, owner, images),
    ]
