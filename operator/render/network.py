"""The engine pods' NetworkPolicy: only the service's gateway (same namespace) and the operator, which scrapes
the engines' /metrics, reach the engine port; anything else in the cluster would bypass the gateway's
routing, overflow and auth. Where the network plugin does not enforce policies the object changes nothing."""

from floodway.operator.render.images import Images
from floodway.operator.render.meta import PART_OF, Owner, engine_name, image_version, metadata, selector
from floodway.operator.spec import InferenceServiceSpec

# The chart's operator pods carry these labels (charts/floodway/templates/_helpers.tpl).
OPERATOR_LABELS = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/component": "operator"}


def scraper_peer(operator_namespace: str | None) -> dict:
    """The operator's pods, in its namespace when known (else in any namespace)."""
    namespaces = ({"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}} if operator_namespace
                  else {})
    return {"namespaceSelector": namespaces, "podSelector": {"matchLabels": OPERATOR_LABELS}}


def engine_network_policy(spec: InferenceServiceSpec, owner: Owner, images: Images,
                          operator_namespace: str | None = None) -> list[dict]:
    """[the policy], or [] when spec.networkPolicy.enabled is false."""
    if not spec.network_policy.enabled:
        return []
    peers = [{"podSelector": {"matchLabels": selector(owner, "gateway")}}, scraper_peer(operator_namespace),
             *spec.network_policy.allow_from]
    return [{
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(owner, engine_name(owner), "engine", image_version(images.engine_image(spec))),
        "spec": {"podSelector": {"matchLabels": selector(owner, "engine")}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": spec.engine.port}]}]},
    }]
