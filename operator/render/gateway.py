"""Gateway objects: its config (the GatewayConfig shape, also written by `floodway up`), ConfigMap,
Deployment, Service and the ServiceAccount + Role that let it read the engine Service's EndpointSlices."""

import hashlib

import yaml
from floodway.operator.gateway.config import Overflow, Routing, Slo, Tenants
from floodway.operator.render.images import Images
from floodway.operator.render.meta import (
    Owner,
    engine_name,
    gateway_name,
    image_version,
    metadata,
    pull_secrets,
    selector,
    spread,
)
from floodway.operator.render.runtime_args import max_loras
from floodway.operator.render.security import LOCKED_CONTAINER, POD_SECURITY
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.base import SpecModel
from pydantic import BaseModel

GATEWAY_PORT = 8080
SERVICE_PORT = 80
CONFIG_DIR = "/etc/floodway"
CONFIG_FILE = "gateway.yaml"
API_KEY_ENV = "FLOODWAY_OVERFLOW_API_KEY"
CLIENT_KEYS_DIR = "/var/run/secrets/floodway/gateway"
CLIENT_KEYS_FILE = "api-keys"
TENANTS_DIR = "/var/run/secrets/floodway/tenants"
TENANTS_FILE = "tenants"


def gateway_config(spec: InferenceServiceSpec, backends: dict, port: int, host: str = "0.0.0.0") -> dict:
    """The gateway's YAML config as a dict; backends is {"static": [...]} or {"kubernetes": {...}}. The spec's
    settings the gateway config has under the same names (slo, gateway.routing, overflow) pass as they are."""
    overflow = same_named(spec.overflow, Overflow)
    if spec.overflow.enabled:
        overflow.update(base_url=overflow["base_url"].rstrip("/"), model=overflow.get("model") or spec.model_name,
                        api_key_env=API_KEY_ENV)
        if spec.autoscaling.priority == "budget":  # the budget wins: the gateway caps overflow at the share
            overflow["max_share"] = spec.autoscaling.overflow_share
    adapters = {"max_loras": max_loras(spec)} if spec.adapters else {}
    return {"host": host, "port": port, "served_models": [spec.model_name, *(a.name for a in spec.adapters)],
            **adapters, "backends": backends,
            "engine_runtime": spec.engine.runtime, "routing": same_named(spec.gateway.routing, Routing),
            "slo": same_named(spec.slo, Slo), "overflow": overflow, **tenants_config(spec), **classes_config(spec)}


def classes_config(spec: InferenceServiceSpec) -> dict:
    """The spec's classes, and the engines' scheduling policy they need to reach the engines, where set."""
    out = {"classes": [c.model_dump() for c in spec.classes]} if spec.classes else {}
    if spec.engine.scheduling_policy != "fcfs":
        out["engine_scheduling_policy"] = spec.engine.scheduling_policy
    return out


def tenants_config(spec: InferenceServiceSpec) -> dict:
    """{"tenants": the spec's gateway.tenants as the gateway config's (snake_case names, unset limits left out)}, or
    nothing where it sets none."""
    tenants = Tenants.model_validate(spec.gateway.tenants.model_dump()).model_dump(exclude_defaults=True)
    return {"tenants": tenants} if tenants else {}


def same_named(section: SpecModel, config: type[BaseModel]) -> dict:
    """The section's set values (None: unset) whose names the gateway config's section `config` has."""
    return {k: v for k, v in section if k in config.model_fields and v is not None}


def cluster_gateway_config(spec: InferenceServiceSpec, owner: Owner) -> dict:
    backends = {"kubernetes": {"namespace": owner.namespace, "service": engine_name(owner), "port": "http"}}
    config = gateway_config(spec, backends, GATEWAY_PORT)
    if spec.gateway.api_keys_secret_ref is not None:
        config["auth"] = {"tokens_file": f"{CLIENT_KEYS_DIR}/{CLIENT_KEYS_FILE}"}
    if spec.gateway.tenants_secret_ref is not None:
        config.setdefault("tenants", {})["keys_file"] = f"{TENANTS_DIR}/{TENANTS_FILE}"
    return config


def config_yaml(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def _meta(spec: InferenceServiceSpec, owner: Owner, images: Images, name: str | None = None) -> dict:
    version = image_version(images.gateway_image(spec))
    return metadata(owner, name or gateway_name(owner), "gateway", version)


def gateway_configmap(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(spec, owner, images),
            "data": {CONFIG_FILE: config_yaml(cluster_gateway_config(spec, owner))}}


def _container(spec: InferenceServiceSpec, images: Images) -> dict:
    env = []
    ref = spec.overflow.api_key_secret_ref
    if spec.overflow.enabled and ref is not None:
        # The key reaches the pod only as an env var; the operator itself never reads Secrets.
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        "name": "gateway", "image": images.gateway_image(spec), "imagePullPolicy": images.pull_policy,
        "command": ["floodway", "gateway"], "args": ["--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "env": env,
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 15, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": LOCKED_CONTAINER,
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
                        + [{"name": name, "mountPath": folder, "readOnly": True}
                           for name, _, folder, _ in _key_files(spec)],
    }


def _key_files(spec: InferenceServiceSpec) -> list[tuple]:
    """(volume name, Secret key ref, folder, file) of each client keys file the spec names."""
    files = (("api-keys", spec.gateway.api_keys_secret_ref, CLIENT_KEYS_DIR, CLIENT_KEYS_FILE),
             ("tenants", spec.gateway.tenants_secret_ref, TENANTS_DIR, TENANTS_FILE))
    return [f for f in files if f[1] is not None]


def _key_volumes(spec: InferenceServiceSpec) -> list[dict]:
    # The client keys reach the pod as files from the Secrets; the operator never reads them.
    return [{"name": name, "secret": {"secretName": ref.name, "items": [{"key": ref.key, "path": file}]}}
            for name, ref, _, file in _key_files(spec)]


def gateway_deployment(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    meta = _meta(spec, owner, images)
    digest = hashlib.sha256(config_yaml(cluster_gateway_config(spec, owner)).encode()).hexdigest()[:16]
    pod = {"serviceAccountName": gateway_name(owner), "securityContext": POD_SECURITY,
           "terminationGracePeriodSeconds": 30, "containers": [_container(spec, images)],
           "volumes": [{"name": "config", "configMap": {"name": gateway_name(owner)}}] + _key_volumes(spec),
           "topologySpreadConstraints": spread(owner, "gateway")}
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = pull_secrets(spec)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            "replicas": spec.gateway.replicas,
            "selector": {"matchLabels": selector(owner, "gateway")},
            "template": {
                # A changed config rolls the gateway pods.
                "metadata": {"labels": meta["labels"], "annotations": {"serving.floodway.io/config-hash": digest}},
                "spec": pod,
            },
        },
    }


def gateway_service(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    """Named like the InferenceService: clients call http://<name>.<namespace>.svc/v1/..."""
    body = {"selector": selector(owner, "gateway"),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}]}
    if spec.gateway.routing.prefix_aware and spec.gateway.replicas > 1:
        # Each gateway replica learns prefixes only from what it routed: a client's turns must reach the same one.
        body["sessionAffinity"] = "ClientIP"
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(spec, owner, images, owner.name), "spec": body}


def gateway_pdb(spec: InferenceServiceSpec, owner: Owner, images: Images) -> list[dict]:
    """The gateway is the service's only way in: a node drain may take its pods only one at a time (none with
    a single replica, which such a budget would make undrainable)."""
    if spec.gateway.replicas < 2:
        return []
    return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(spec, owner, images),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(owner, "gateway")},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"}}]


def gateway_rbac(spec: InferenceServiceSpec, owner: Owner, images: Images) -> list[dict]:
    name = gateway_name(owner)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec, owner, images),
         "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(spec, owner, images),
         "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(spec, owner, images),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}]},
    ]


def service_url(owner: Owner) -> str:
    return f"http://{owner.name}.{owner.namespace}.svc/v1"
