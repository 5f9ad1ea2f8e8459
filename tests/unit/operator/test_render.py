import pytest
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.render import Images, Owner, clamp_replicas, render, service_url
from floodway.operator.render.engine import engine_args
from floodway.operator.render.gateway import API_KEY_ENV, cluster_gateway_config
from floodway.operator.spec import InferenceServiceSpec

OWNER = Owner("chat", "team", "uid-123")
OVERFLOW = {"enabled": True, "baseURL": "https://api.example.com/v1/", "model": "small",
            "apiKeySecretRef": {"name": "overflow-key", "key": "api-key"}, "maxRequestsPerMinute": 600}


def spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "Qwen/Qwen2.5-7B-Instruct", **kw})


def by_kind(objs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_objects_names_owner_and_labels():
    objs = render(spec(), OWNER, Images())
    assert sorted(by_kind(objs)) == sorted([
        ("ServiceAccount", "chat-gateway"), ("Role", "chat-gateway"), ("RoleBinding", "chat-gateway"),
        ("ConfigMap", "chat-gateway"), ("NetworkPolicy", "chat-engine"), ("Service", "chat-engine"),
        ("Deployment", "chat-engine"), ("PodDisruptionBudget", "chat-engine"), ("Deployment", "chat-gateway"),
        ("PodDisruptionBudget", "chat-gateway"), ("Service", "chat")])
    for o in objs:
        meta = o["metadata"]
        assert meta["namespace"] == "team"
        assert meta["ownerReferences"] == [{"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
                                            "name": "chat", "uid": "uid-123", "controller": True,
                                            "blockOwnerDeletion": True}]
        assert meta["labels"]["app.kubernetes.io/instance"] == "chat"
        assert meta["labels"]["app.kubernetes.io/part-of"] == "floodway"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "floodway-operator"
    assert "ownerReferences" not in render(spec(), Owner("chat", "team"), Images())[0]["metadata"]


def test_render_is_pure_and_deterministic():
    assert render(spec(), OWNER, Images()) == render(spec(), OWNER, Images())


def test_engine_deployment_gpu_probes_and_security():
    dep = by_kind(render(spec(resources={"gpus": 1, "nodeSelector": {"gpu": "h100"}},
                              engine={"startupTimeoutSeconds": 1200, "terminationGracePeriodSeconds": 90}),
                         OWNER, Images()))[("Deployment", "chat-engine")]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1200
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["terminationGracePeriodSeconds"] == 90
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert c["command"] == ["floodway", "engine"] and c["image"] == Images().engine
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_cpu_engine_has_no_gpu_limit_and_no_cpu_limit():
    c = by_kind(render(spec(resources={"gpus": 0, "cpu": "2", "memory": "4Gi"}), OWNER, Images()))[
        ("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    default = by_kind(render(spec(resources={"gpus": 0}), OWNER, Images()))[
        ("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"][0]
    assert default["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}  # Burstable, never BestEffort


def test_engine_args_follow_the_spec():
    s = spec(engine={"maxModelLen": 8192, "maxNumSeqs": 128, "enablePrefixCaching": False, "extraArgs": ["--x"]},
             servedModelName="chat")
    args = engine_args(s, "0.0.0.0", 8000)
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert pairs["--model"] == "Qwen/Qwen2.5-7B-Instruct" and pairs["--served-model-name"] == "chat"
    assert pairs["--max-model-len"] == "8192" and pairs["--max-num-seqs"] == "128"
    assert "--no-enable-prefix-caching" in args and args[-1] == "--x"


def test_vllm_runtime_uses_its_image_and_entrypoint():
    dep = by_kind(render(spec(engine={"runtime": "vllm"}, resources={"gpus": 4}), OWNER, Images()))[
        ("Deployment", "chat-engine")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("vllm/vllm-openai:") and "command" not in c
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert by_kind(render(spec(engine={"runtime": "vllm", "image": "my/vllm:1"}), OWNER, Images()))[
        ("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"][0]["image"] == "my/vllm:1"


def test_overflow_key_only_as_secret_reference():
    objs = by_kind(render(spec(overflow=OVERFLOW), OWNER, Images()))
    env = objs[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": "overflow-key", "key": "api-key"}}}]
    config = cluster_gateway_config(spec(overflow=OVERFLOW), OWNER)
    assert config["overflow"] == {"enabled": True, "max_waiting_per_replica": OverflowPolicy.max_waiting_per_replica,
                                  "base_url": "https://api.example.com/v1", "model": "small",
                                  "api_key_env": API_KEY_ENV, "max_requests_per_minute": 600}
    assert config["backends"] == {"kubernetes": {"namespace": "team", "service": "chat-engine", "port": "http"}}
    no_overflow = by_kind(render(spec(), OWNER, Images()))[("Deployment", "chat-gateway")]
    assert no_overflow["spec"]["template"]["spec"]["containers"][0]["env"] == []


def test_gateway_config_change_rolls_the_gateway():
    def digest(s):
        return by_kind(render(s, OWNER, Images()))[("Deployment", "chat-gateway")]["spec"]["template"][
            "metadata"]["annotations"]["serving.floodway.io/config-hash"]
    assert digest(spec()) != digest(spec(slo={"ttftMs": 200}))
    assert digest(spec()) == digest(spec(replicas={"max": 9}))


def test_gateway_rbac_reads_only_endpointslices():
    role = by_kind(render(spec(), OWNER, Images()))[("Role", "chat-gateway")]
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list", "watch"]}]


@pytest.mark.parametrize("wanted, enabled, expected", [(None, True, 2), (1, True, 2), (5, True, 5), (99, True, 6),
                                                       (5, False, 2)])
def test_replicas_stay_in_bounds(wanted, enabled, expected):
    s = spec(replicas={"min": 2, "max": 6}, autoscaling={"enabled": enabled})
    assert clamp_replicas(s, wanted) == expected
    assert by_kind(render(s, OWNER, Images(), wanted))[("Deployment", "chat-engine")]["spec"]["replicas"] == expected


def test_images_from_environment():
    images = Images.from_env({"FLOODWAY_ENGINE_IMAGE": "reg/engine:2", "FLOODWAY_GATEWAY_IMAGE": "reg/op:2"})
    objs = by_kind(render(spec(), OWNER, images))
    assert objs[("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/engine:2"
    assert objs[("Deployment", "chat-engine")]["metadata"]["labels"]["app.kubernetes.io/version"] == "2"
    assert objs[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/op:2"
    assert service_url(OWNER) == "http://chat.team.svc/v1"


def test_rendered_gateway_config_is_a_valid_gateway_config():
    from floodway.operator.gateway.config import GatewayConfig
    from floodway.operator.render.gateway import gateway_config

    for s in (spec(), spec(overflow=OVERFLOW)):
        config = GatewayConfig.model_validate(cluster_gateway_config(s, OWNER))
        assert config.backends.kubernetes.service == "chat-engine" and config.port == 8080
        local = GatewayConfig.model_validate(gateway_config(s, {"static": ["http://127.0.0.1:9"]}, 9000, "127.0.0.1"))
        assert local.overflow.enabled == s.overflow.enabled
    with_overflow = cluster_gateway_config(spec(overflow=OVERFLOW), OWNER)
    assert GatewayConfig.model_validate(with_overflow).overflow.model == "small"


def test_gateway_client_keys_from_a_secret_file():
    from floodway.operator.gateway.config import GatewayConfig

    keyed = spec(gateway={"apiKeysSecretRef": {"name": "client-keys", "key": "keys"}})
    pod = by_kind(render(keyed, OWNER, Images()))[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "api-keys")
    assert volume["secret"] == {"secretName": "client-keys", "items": [{"key": "keys", "path": "api-keys"}]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-keys")
    assert mount["readOnly"] is True
    config = GatewayConfig.model_validate(cluster_gateway_config(keyed, OWNER))
    assert config.auth.tokens_file == f"{mount['mountPath']}/api-keys"
    assert not config.debug_state  # /debug/state stays off unless asked for
    open_pod = by_kind(render(spec(), OWNER, Images()))[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]
    assert [v["name"] for v in open_pod["volumes"]] == ["config"]
    assert cluster_gateway_config(spec(), OWNER).get("auth") is None


def test_prefix_routing_keeps_a_client_on_one_gateway_replica():
    """Each gateway replica has its own prefix index, so a conversation's turns must reach the one that saw it."""
    def service(**gateway):
        return by_kind(render(spec(gateway=gateway), OWNER, Images()))[("Service", "chat")]["spec"]

    assert service()["sessionAffinity"] == "ClientIP"
    assert "sessionAffinity" not in service(replicas=1)
    assert "sessionAffinity" not in service(routing={"prefixAware": False})
