"""Engine objects: Deployment, Service and PodDisruptionBudget, and the engine command line that
`floodway up` runs locally too."""

import math

from floodway.operator.planner.gpus import GPU_PRODUCT_LABEL, node_products
from floodway.operator.render.images import Images
from floodway.operator.render.merge import strategic_merge
from floodway.operator.render.meta import (
    Owner,
    engine_name,
    image_version,
    labels,
    metadata,
    pull_secrets,
    selector,
    spread,
)
from floodway.operator.render.runtime_args import RUNTIME_ARGS
from floodway.operator.render.security import LOCKED_CONTAINER, POD_SECURITY
from floodway.operator.runtimes import runtime
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.model_source import MODELS_DIR

CACHE_DIR = "/cache"
TMP_SIZE_LIMIT = "1Gi"  # scratch space only: downloads and compiled kernels go to the cache
PROBE_PERIOD_S = 10


def engine_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    """The runtime's command-line arguments for the spec, the model sharded over the pod's GPUs where the
    runtime can (the spec refuses gpus > 1 where it cannot), then engine.extraArgs."""
    r, gpus = runtime(spec.engine.runtime), spec.resources.gpus
    tp = [r.tensor_parallel_flag, str(gpus)] if r.tensor_parallel_flag and gpus > 1 else []
    return RUNTIME_ARGS[r.name](spec, host, port) + tp + list(spec.engine.extra_args)


def ready_path(spec: InferenceServiceSpec) -> str:
    return runtime(spec.engine.runtime).ready_path


def _resources(spec: InferenceServiceSpec) -> dict:
    r = spec.resources
    requests = r.requests()
    limits = {"memory": r.memory} if r.memory else {}
    if r.gpus:
        limits["nvidia.com/gpu"] = str(r.gpus)
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def _probes(spec: InferenceServiceSpec) -> dict:
    def get(path: str) -> dict:
        return {"httpGet": {"path": path, "port": "http"}}

    # The startup probe covers model loading (minutes on a GPU); liveness starts only after it passes.
    startup_failures = math.ceil(spec.engine.startup_timeout_seconds / PROBE_PERIOD_S)
    health = runtime(spec.engine.runtime).health_path
    return {
        "startupProbe": {**get(health), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": startup_failures},
        "readinessProbe": {**get(ready_path(spec)), "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {**get(health), "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3},
    }


def _env(spec: InferenceServiceSpec) -> list[dict]:
    e = spec.engine
    env = [{"name": "HOME", "value": CACHE_DIR}, {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
           {"name": "FLOODWAY_CACHE", "value": f"{CACHE_DIR}/floodway"}]
    if e.hf_token_secret_ref:
        ref = e.hf_token_secret_ref
        # The kubelet resolves it when the container starts; the operator never reads the Secret.
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env + [v.dump() for v in e.env]


def _volumes(spec: InferenceServiceSpec) -> tuple[list[dict], list[dict]]:
    """(pod volumes, container mounts). The root filesystem is read-only: every writable path is a volume."""
    s = spec.storage
    cache = ({"persistentVolumeClaim": {"claimName": s.cache_claim.name}} if s.cache_claim
             else {"emptyDir": {"sizeLimit": s.cache_size_limit}})
    volumes = [{"name": "cache", **cache},
               # Shared memory for multi-GPU collectives and tokenizer workers; memory-backed, so bounded.
               {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": s.shm_size_limit}},
               {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}]
    mounts = [{"name": "cache", "mountPath": CACHE_DIR}, {"name": "shm", "mountPath": "/dev/shm"},
              {"name": "tmp", "mountPath": "/tmp"}]
    if s.model_claim:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": s.model_claim.name,
                                                                    "readOnly": True}})
        mounts.append({"name": "models", "mountPath": MODELS_DIR, "readOnly": True})
    return volumes, mounts


def _container(spec: InferenceServiceSpec, images: Images, mounts: list[dict]) -> dict:
    e = spec.engine
    image = images.engine_image(spec)
    container = {
        "name": "engine", "image": image, "imagePullPolicy": images.pull_policy,
        "args": engine_args(spec, "0.0.0.0", e.port),
        "ports": [{"name": "http", "containerPort": e.port, "protocol": "TCP"}],
        "env": _env(spec),
        "resources": _resources(spec),
        **_probes(spec),
        "securityContext": LOCKED_CONTAINER,
        "volumeMounts": mounts,
    }
    if runtime(e.runtime).command:  # else the image's entrypoint
        container["command"] = list(runtime(e.runtime).command)
    return container


def _meta(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    return metadata(owner, engine_name(owner), "engine", image_version(images.engine_image(spec)))


def rollout_strategy(spec: InferenceServiceSpec) -> dict:
    """A GPU pool has no spare GPU for a surge pod (it would stay Pending and the rollout with it), so GPU
    replicas are replaced one at a time, down first; CPU replicas surge, so capacity never dips."""
    gpu = spec.resources.gpus > 0
    r = spec.rollout
    surge = r.max_surge if r.max_surge is not None else (0 if gpu else 1)
    unavailable = r.max_unavailable if r.max_unavailable is not None else (1 if gpu else 0)
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def node_affinity(spec: InferenceServiceSpec) -> dict | None:
    """The engine pods' affinity: the user's, plus a required node affinity on the GPU product label when
    gpuType names a GPU that GPU feature discovery labels and the user chose no nodes (a nodeSelector or an
    affinity.nodeAffinity of their own wins, so clusters without that label stay schedulable)."""
    r = spec.resources
    products = node_products(r.gpu_type) if r.gpus else ()
    if not products or r.node_selector or (r.affinity or {}).get("nodeAffinity") is not None:
        return r.affinity
    term = {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(products)}]}
    return {**(r.affinity or {}),
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _pod_spec(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    r = spec.resources
    volumes, mounts = _volumes(spec)
    pod = {
        "terminationGracePeriodSeconds": spec.engine.termination_grace_period_seconds,
        # The engine never calls the Kubernetes API: no token in the pod, no Service env vars.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": POD_SECURITY,
        "containers": [_container(spec, images, mounts)],
        "volumes": volumes,
        "topologySpreadConstraints": spread(owner, "engine"),
    }
    optional = {"nodeSelector": dict(r.node_selector) or None,
                "tolerations": [t.dump() for t in r.tolerations] or None,
                "affinity": node_affinity(spec), "priorityClassName": r.priority_class_name,
                "runtimeClassName": r.runtime_class_name, "imagePullSecrets": pull_secrets(spec)}
    pod.update({k: v for k, v in optional.items() if v})
    return pod


def engine_deployment(spec: InferenceServiceSpec, owner: Owner, images: Images, replicas: int) -> dict:
    pod_labels = labels(owner, "engine", image_version(images.engine_image(spec)))
    template = {"metadata": {"labels": pod_labels, "annotations": {
        "prometheus.io/scrape": "true", "prometheus.io/port": str(spec.engine.port),
        "prometheus.io/path": "/metrics"}}, "spec": _pod_spec(spec, owner, images)}
    if spec.engine.pod_template:
        template = strategic_merge(template, spec.engine.pod_template)
        template["metadata"]["labels"] = {**template["metadata"].get("labels", {}), **selector(owner, "engine")}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(spec, owner, images),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(owner, "engine")},
            "strategy": rollout_strategy(spec),
            "template": template,
        },
    }


def engine_service(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(spec, owner, images),
        "spec": {"selector": selector(owner, "engine"),
                 "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"}]},
    }


def engine_pdb(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    # Voluntary evictions (node drains) take engines one at a time, so the rest keep serving. An engine still
    # loading its model (unready for up to startupTimeoutSeconds) may always be evicted: it serves nothing yet,
    # and must not block a node drain for half an hour.
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": _meta(spec, owner, images),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(owner, "engine")},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
