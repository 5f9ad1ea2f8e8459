"""Engine objects: Deployment, Service and PodDisruptionBudget, and the engine command line that
`floodway up` runs locally too."""

import math

from floodway.operator.render.images import Images
from floodway.operator.render.meta import Owner, engine_name, image_version, labels, metadata, selector
from floodway.operator.render.security import CONTAINER_SECURITY, POD_SECURITY
from floodway.operator.spec import InferenceServiceSpec

CACHE_DIR = "/cache"
PROBE_PERIOD_S = 10


def engine_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    """vLLM-compatible flags: our engine takes the same names, so one list serves both runtimes."""
    e = spec.engine
    args = ["--model", spec.model, "--served-model-name", spec.model_name, "--host", host, "--port", str(port),
            "--dtype", e.dtype, "--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs),
            "--max-num-batched-tokens", str(e.max_num_batched_tokens), "--block-size", str(e.block_size),
            "--gpu-memory-utilization", str(e.gpu_memory_utilization),
            "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"]
    if e.runtime == "vllm" and spec.resources.gpus > 1:
        args += ["--tensor-parallel-size", str(spec.resources.gpus)]
    if e.runtime == "floodway":
        # Finish in-flight requests after SIGTERM, a few seconds inside the pod's grace period.
        args += ["--drain-timeout", str(max(e.termination_grace_period_seconds - 5, 1))]
    return args + list(e.extra_args)


def ready_path(spec: InferenceServiceSpec) -> str:
    # vLLM answers /health only once the model is loaded; ours has a separate /ready that also reports draining.
    return "/ready" if spec.engine.runtime == "floodway" else "/health"


def _resources(spec: InferenceServiceSpec) -> dict:
    r = spec.resources
    amounts: dict[str, str] = {}
    if r.cpu:
        amounts["cpu"] = r.cpu
    if r.memory:
        amounts["memory"] = r.memory
    limits = dict(amounts)
    if r.gpus:
        limits["nvidia.com/gpu"] = str(r.gpus)
    out = {}
    if amounts:
        out["requests"] = amounts
    if limits:
        out["limits"] = limits
    return out


def _probes(spec: InferenceServiceSpec) -> dict:
    def get(path: str) -> dict:
        return {"httpGet": {"path": path, "port": "http"}}

    # The startup probe covers model loading (minutes on a GPU); liveness starts only after it passes.
    startup_failures = math.ceil(spec.engine.startup_timeout_seconds / PROBE_PERIOD_S)
    return {
        "startupProbe": {**get("/health"), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": startup_failures},
        "readinessProbe": {**get(ready_path(spec)), "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {**get("/health"), "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3},
    }


def _container(spec: InferenceServiceSpec, images: Images) -> dict:
    e = spec.engine
    image = images.engine_image(spec)
    container = {
        "name": "engine", "image": image, "imagePullPolicy": images.pull_policy,
        "args": engine_args(spec, "0.0.0.0", e.port),
        "ports": [{"name": "http", "containerPort": e.port, "protocol": "TCP"}],
        "env": [{"name": "HOME", "value": CACHE_DIR}, {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
                {"name": "FLOODWAY_CACHE", "value": f"{CACHE_DIR}/floodway"}]
               + [{"name": v.name, "value": v.value} for v in e.env],
        "resources": _resources(spec),
        **_probes(spec),
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_DIR}, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    if e.runtime == "floodway":
        container["command"] = ["floodway", "engine"]
    return container


def _meta(spec: InferenceServiceSpec, owner: Owner, images: Images) -> dict:
    return metadata(owner, engine_name(owner), "engine", image_version(images.engine_image(spec)))


def engine_deployment(spec: InferenceServiceSpec, owner: Owner, images: Images, replicas: int) -> dict:
    pod_labels = labels(owner, "engine", image_version(images.engine_image(spec)))
    pod_spec = {
        "terminationGracePeriodSeconds": spec.engine.termination_grace_period_seconds,
        "securityContext": POD_SECURITY,
        "containers": [_container(spec, images)],
        # Model downloads and compiled kernels live here; shared memory for multi-GPU collectives.
        "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}],
    }
    if spec.resources.node_selector:
        pod_spec["nodeSelector"] = dict(spec.resources.node_selector)
    if spec.resources.tolerations:
        pod_spec["tolerations"] = [t.dump() for t in spec.resources.tolerations]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(spec, owner, images),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(owner, "engine")},
            # Add the new replica before removing an old one: capacity never dips during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": pod_labels, "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": str(spec.engine.port),
                "prometheus.io/path": "/metrics"}}, "spec": pod_spec},
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
    # Voluntary evictions (node drains) take engines one at a time, so the rest keep serving.
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": _meta(spec, owner, images),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(owner, "engine")}},
    }
