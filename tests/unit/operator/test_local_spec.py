"""What `floodway up` does with fields only a cluster can honour: one warning line per field a spec sets
(pinned here), the spec it runs without them, and what it honours locally (env values, engine args, Secrets
through $FLOODWAY_SECRET_<NAME>_<KEY>)."""

from floodway.operator.local.cluster_only import CLUSTER_ONLY, engine_env, local_spec
from floodway.operator.render.engine import engine_args
from floodway.operator.spec import InferenceServiceSpec

CLUSTER = {
    "model": "served-name", "imagePullSecrets": ["regcred"],
    "engine": {"image": "registry.example/engine:1", "port": 9000, "extraArgs": ["--step-delay-ms", "5"],
               "podTemplate": {"spec": {"hostIPC": True}}, "hfTokenSecretRef": {"name": "hf", "key": "token"},
               "env": [{"name": "PLAIN", "value": "1"},
                       {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "team", "key": "api.key"}}},
                       {"name": "FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}]},
    "resources": {"gpus": 1, "gpuType": "l4", "cpu": "4", "memory": "16Gi", "nodeSelector": {"pool": "gpu"},
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                  "affinity": {"podAntiAffinity": {}}, "priorityClassName": "p", "runtimeClassName": "nvidia"},
    "gateway": {"replicas": 3, "image": "registry.example/gw:1", "apiKeysSecretRef": {"name": "keys", "key": "k"},
                "tenantsSecretRef": {"name": "tenants", "key": "k"}},
    "storage": {"modelClaim": {"name": "models", "path": "llama"}, "cacheClaim": {"name": "cache"},
                "cacheSizeLimit": "10Gi", "shmSizeLimit": "4Gi"},
    "rollout": {"maxSurge": 1}, "networkPolicy": {"enabled": False},
}


def test_one_warning_line_per_cluster_only_field():
    run = local_spec(InferenceServiceSpec.model_validate(CLUSTER), {})
    fields = [line.split(":")[0] for line in run.warnings]
    assert fields == [f"spec.{p}" for p in CLUSTER_ONLY] + [
        "spec.engine.env[FROM_SECRET].valueFrom", "spec.engine.env[FROM_MAP].valueFrom", "spec.engine.hfTokenSecretRef"]
    assert run.warnings[fields.index("spec.storage.modelClaim")] == \
        "spec.storage.modelClaim: ignored by `floodway up`: the engines load spec.model"
    assert "FLOODWAY_SECRET_TEAM_API_KEY is not set" in run.warnings[fields.index("spec.engine.env[FROM_SECRET]."
                                                                                 "valueFrom")]


def test_the_spec_it_runs_keeps_what_one_machine_can_honour():
    run = local_spec(InferenceServiceSpec.model_validate(CLUSTER), {"FLOODWAY_SECRET_TEAM_API_KEY": "s3cret",
                                                                    "FLOODWAY_SECRET_HF_TOKEN": "hf_x"})
    s = run.spec
    assert engine_env(s) == {"PLAIN": "1", "FROM_SECRET": "s3cret", "HF_TOKEN": "hf_x"}
    args = engine_args(s, "127.0.0.1", 8001)
    assert args[args.index("--model") + 1] == "served-name" and args[-2:] == ["--step-delay-ms", "5"]
    assert s.storage.model_claim is None and s.engine.pod_template is None and not s.resources.node_selector
    assert (s.resources.gpus, s.resources.gpu_type) == (1, "l4")  # the fit check still reads them
    assert not any("FROM_SECRET" in w or "hfTokenSecretRef" in w for w in run.warnings)


def test_a_spec_with_only_local_fields_warns_nothing():
    s = InferenceServiceSpec.model_validate({"model": "m", "resources": {"gpus": 0}, "replicas": {"min": 0, "max": 3},
                                             "engine": {"env": [{"name": "A", "value": "b"}], "maxNumSeqs": 4},
                                             "gateway": {"replicas": 2}, "rollout": {}})
    run = local_spec(s, {})
    assert run.warnings == () and run.spec == s


def test_the_built_in_manifest_warns_nothing():
    from floodway.operator.local.manifest import DEFAULT_MANIFEST, build

    assert local_spec(build(DEFAULT_MANIFEST, "http://127.0.0.1:9/v1").spec, {}).warnings == ()
