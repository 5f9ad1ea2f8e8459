"""The engine and gateway pods as rendered: models from volumes, credentials only as Secret references,
scheduling fields, rollout and disruption settings, the lock-down, the NetworkPolicy, the external scaling mode
and the pod-template override; every variant validated against the Kubernetes OpenAPI schema."""

import pytest
from floodway.operator.render import Images, Owner, clamp_replicas, render
from floodway.operator.spec import InferenceServiceSpec

OWNER = Owner("chat", "team", "uid-1")
K8S_VERSION = "1.31.0"


def spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "tiny-llama", **kw})


def objects(s: InferenceServiceSpec, **kw) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(s, OWNER, Images(), **kw)}


def engine_pod(s: InferenceServiceSpec) -> dict:
    return objects(s)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]


def env(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["containers"][0]["env"]}


def mounts(pod: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}


def volumes(pod: dict) -> dict[str, dict]:
    return {v["name"]: v for v in pod["volumes"]}


def arg(pod: dict, flag: str) -> str:
    args = pod["containers"][0]["args"]
    return args[args.index(flag) + 1]


def test_model_from_a_claim_mounted_read_only_and_a_shared_cache_claim():
    pod = engine_pod(spec(servedModelName="tiny", storage={"modelClaim": {"name": "models", "path": "tiny-llama"},
                                                          "cacheClaim": {"name": "hf-cache"}}))
    assert arg(pod, "--model") == "/models/tiny-llama" and arg(pod, "--served-model-name") == "tiny"
    assert volumes(pod)["models"] == {"name": "models", "persistentVolumeClaim": {"claimName": "models",
                                                                                  "readOnly": True}}
    assert mounts(pod)["/models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert volumes(pod)["cache"] == {"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}
    assert mounts(pod)["/cache"]["name"] == "cache"
    assert env(pod)["HF_HOME"]["value"].startswith("/cache/") and env(pod)["FLOODWAY_CACHE"]["value"].startswith(
        "/cache/")


def test_without_claims_the_model_is_the_id_and_the_cache_a_bounded_emptydir():
    pod = engine_pod(spec())
    assert arg(pod, "--model") == "tiny-llama" and "models" not in volumes(pod)
    assert volumes(pod)["cache"]["emptyDir"] == {"sizeLimit": "100Gi"}
    assert volumes(pod)["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    pod = engine_pod(spec(storage={"cacheSizeLimit": "20Gi", "shmSizeLimit": "8Gi"}))
    assert volumes(pod)["cache"]["emptyDir"]["sizeLimit"] == "20Gi"
    assert volumes(pod)["shm"]["emptyDir"]["sizeLimit"] == "8Gi"


def test_credentials_reach_the_pod_only_as_secret_references():
    pod = engine_pod(spec(engine={"hfTokenSecretRef": {"name": "hf-token", "key": "token"}, "env": [
        {"name": "A", "value": "b"},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}}]}))
    e = env(pod)
    assert e["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    assert e["A"] == {"name": "A", "value": "b"}
    assert e["B"] == {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    assert e["C"] == {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}}
    assert "HF_TOKEN" not in env(engine_pod(spec()))


def test_scheduling_fields_reach_the_engine_pod():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}]}}}
    s = spec(resources={"gpus": 1, "nodeSelector": {"pool": "gpu"}, "affinity": affinity,
                        "priorityClassName": "inference", "runtimeClassName": "nvidia",
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
             imagePullSecrets=["regcred"])
    objs = objects(s)
    pod = objs[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    assert pod["affinity"] == affinity and pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["priorityClassName"] == "inference" and pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    gateway = objs[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]
    assert gateway["imagePullSecrets"] == [{"name": "regcred"}]
    bare = engine_pod(spec())
    assert not {"affinity", "priorityClassName", "runtimeClassName", "imagePullSecrets", "tolerations"} & bare.keys()


def gpu_products(pod: dict) -> list[str] | None:
    """The values of the GPU-product node affinity term, None without one."""
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = [e for t in (required or {}).get("nodeSelectorTerms", []) for e in t["matchExpressions"]
             if e["key"] == "nvidia.com/gpu.product"]
    return terms[0]["values"] if terms else None


def test_gpu_type_requires_nodes_labelled_with_that_gpu():
    assert gpu_products(engine_pod(spec(resources={"gpus": 1, "gpuType": "h100"}))) == ["NVIDIA-H100-80GB-HBM3"]
    # a GFD product name is a gpuType too, and every product of the row is allowed (A100 80GB SXM4 and PCIe)
    assert gpu_products(engine_pod(spec(resources={"gpus": 1, "gpuType": "NVIDIA-A100-SXM4-80GB"}))) == \
        ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"]
    anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}
    pod = engine_pod(spec(resources={"gpus": 1, "gpuType": "l4", "affinity": anti}))
    assert gpu_products(pod) == ["NVIDIA-L4"] and pod["affinity"]["podAntiAffinity"] == anti["podAntiAffinity"]


@pytest.mark.parametrize("resources", [
    {"gpus": 0, "gpuType": "l4"},  # a CPU pool
    {"gpus": 1},  # no type
    {"gpus": 1, "gpuType": "mi300x"},  # GPU feature discovery labels NVIDIA GPUs only
    {"gpus": 1, "gpuType": "custom-48g", "gpuMemoryGiB": 48},  # not in the table
    {"gpus": 1, "gpuType": "l4", "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},  # the user's
    {"gpus": 1, "gpuType": "l4", "affinity": {"nodeAffinity": {}}},  # turned off
])
def test_gpu_type_selects_no_node_where_it_cannot_or_the_user_chose(resources):
    pod = engine_pod(spec(resources=resources))
    assert gpu_products(pod) is None
    assert pod.get("affinity") == resources.get("affinity") and pod.get("nodeSelector") == resources.get("nodeSelector")


@pytest.mark.parametrize("gpus, rollout, expected", [
    (1, {}, {"maxSurge": 0, "maxUnavailable": 1}),  # a full GPU pool has no GPU for a surge pod
    (0, {}, {"maxSurge": 1, "maxUnavailable": 0}),  # on CPU, capacity never dips
    (1, {"maxSurge": "25%", "maxUnavailable": 0}, {"maxSurge": "25%", "maxUnavailable": 0}),
    (0, {"maxUnavailable": 2}, {"maxSurge": 1, "maxUnavailable": 2}),
])
def test_rollout_is_safe_for_fixed_gpu_pools_by_default(gpus, rollout, expected):
    dep = objects(spec(resources={"gpus": gpus}, rollout=rollout))[("Deployment", "chat-engine")]
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": expected}


def test_engine_pods_are_locked_down():
    pod = engine_pod(spec())
    c = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and pod["securityContext"]["runAsNonRoot"]
    assert mounts(pod)["/tmp"]["name"] == "tmp" and volumes(pod)["tmp"]["emptyDir"]["sizeLimit"]
    assert all("sizeLimit" in v["emptyDir"] for v in pod["volumes"] if "emptyDir" in v)
    # Every writable path the runtimes use is a volume: HOME and the caches live under /cache.
    assert env(pod)["HOME"]["value"] == "/cache"
    gateway = objects(spec())[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]
    assert gateway["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_network_policy_admits_only_the_gateway_and_the_scraper():
    pol = objects(spec(engine={"port": 9000}), operator_namespace="floodway-system")[("NetworkPolicy", "chat-engine")]
    assert pol["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    [rule] = pol["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9000}]
    gateway, scraper = rule["from"]
    assert gateway == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "floodway",
                                                       "app.kubernetes.io/instance": "chat",
                                                       "app.kubernetes.io/component": "gateway"}}}
    assert scraper["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "floodway-system"}}
    assert scraper["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    extra = objects(spec(networkPolicy={"allowFrom": [prom]}))[("NetworkPolicy", "chat-engine")]
    assert extra["spec"]["ingress"][0]["from"][2] == prom
    assert extra["spec"]["ingress"][0]["from"][1]["namespaceSelector"] == {}  # operator's namespace unknown
    assert ("NetworkPolicy", "chat-engine") not in objects(spec(networkPolicy={"enabled": False}))


def test_the_operator_chart_labels_match_the_scraper_peer():
    from floodway.operator.crdgen.files import REPO_ROOT
    from floodway.operator.render.network import OPERATOR_LABELS

    helpers = (REPO_ROOT / "charts/floodway/templates/_helpers.tpl").read_text()
    for key, value in OPERATOR_LABELS.items():
        assert f"{key}: {value}" in helpers


def test_disruption_budgets_and_spread():
    objs = objects(spec())
    engine = objs[("PodDisruptionBudget", "chat-engine")]["spec"]
    assert engine["maxUnavailable"] == 1 and engine["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    gateway = objs[("PodDisruptionBudget", "chat-gateway")]["spec"]
    assert gateway["selector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert objs[("Deployment", "chat-gateway")]["spec"]["replicas"] == 2  # the only way in: two by default
    assert ("PodDisruptionBudget", "chat-gateway") not in objects(spec(gateway={"replicas": 1}))
    for name, component in (("chat-engine", "engine"), ("chat-gateway", "gateway")):
        [tsc] = objs[("Deployment", name)]["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert tsc["topologyKey"] == "kubernetes.io/hostname" and tsc["whenUnsatisfiable"] == "ScheduleAnyway"
        assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component


@pytest.mark.parametrize("mode, count, wanted, expected", [
    ("external", 3, 1, 3), ("external", 9, 1, 5), ("external", 0, 4, 2), ("floodway", 3, 4, 4),
    ("floodway", 3, None, 2)])
def test_external_mode_follows_the_scale_subresource_count(mode, count, wanted, expected):
    s = spec(replicas={"min": 2, "max": 5, "count": count}, autoscaling={"mode": mode})
    assert clamp_replicas(s, wanted) == expected
    assert objects(s, replicas=wanted)[("Deployment", "chat-engine")]["spec"]["replicas"] == expected


def test_pod_template_override_merges_strategically_and_keeps_the_selector():
    override = {"metadata": {"labels": {"team": "a", "app.kubernetes.io/component": "oops"},
                             "annotations": {"prometheus.io/scrape": None}},
                "spec": {"hostIPC": None, "dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"]},
                         "containers": [{"name": "engine", "env": [{"name": "HOME", "value": "/tmp"}],
                                         "volumeMounts": [{"mountPath": "/extra", "name": "extra"}]},
                                        {"name": "sidecar", "image": "busybox"}],
                         "volumes": [{"name": "extra", "emptyDir": {"sizeLimit": "1Gi"}}]}}
    dep = objects(spec(engine={"podTemplate": override}))[("Deployment", "chat-engine")]
    meta, pod = dep["spec"]["template"]["metadata"], dep["spec"]["template"]["spec"]
    assert meta["labels"]["team"] == "a"
    assert dep["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()  # still selects its pods
    assert "prometheus.io/scrape" not in meta["annotations"] and "prometheus.io/port" in meta["annotations"]
    assert [c["name"] for c in pod["containers"]] == ["engine", "sidecar"]
    assert env(pod)["HOME"]["value"] == "/tmp" and "HF_HOME" in env(pod)
    assert "/extra" in mounts(pod) and "/models" not in mounts(pod) and "cache" in volumes(pod)
    assert pod["dnsPolicy"] == "None" and pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("kw", [
    {},
    {"storage": {"modelClaim": {"name": "m", "path": "x"}, "cacheClaim": {"name": "c"}},
     "engine": {"hfTokenSecretRef": {"name": "hf", "key": "t"},
                "env": [{"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
    {"engine": {"runtime": "vllm"}, "resources": {
        "gpus": 4, "gpuType": "a100-80gb",
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
        "priorityClassName": "p", "runtimeClassName": "nvidia"}, "imagePullSecrets": ["r"],
     "rollout": {"maxSurge": "50%"}, "networkPolicy": {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}},
    {"engine": {"podTemplate": {"spec": {"containers": [{"name": "engine", "resources": {
        "limits": {"ephemeral-storage": "10Gi"}}}]}}}, "gateway": {"replicas": 3}},
])
def test_rendered_objects_are_valid_kubernetes(kw):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extra)")
    for obj in render(spec(**kw), OWNER, Images(), operator_namespace="floodway-system"):
        kv.validate(obj, K8S_VERSION, strict=True)
