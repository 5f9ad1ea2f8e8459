import pytest
from floodway.operator.spec import SpecError, load, parse


def manifest(**spec) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team"}, "spec": {"model": "floodway/tiny-llama", **spec}}


def test_defaults_fill_every_section():
    obj = parse(manifest())
    assert obj.metadata.namespace == "team"
    assert obj.spec.engine.runtime == "floodway" and obj.spec.replicas.min == 1 and obj.spec.replicas.max == 4
    assert obj.spec.overflow.enabled is False and obj.spec.model_name == "floodway/tiny-llama"


def test_camel_case_round_trip():
    spec = parse(manifest(engine={"maxModelLen": 1024}, overflow={
        "enabled": True, "baseURL": "https://api.example.com/v1", "apiKeySecretRef": {"name": "k", "key": "api-key"}},
    )).spec
    dumped = spec.dump()
    assert dumped["engine"]["maxModelLen"] == 1024
    assert dumped["overflow"]["baseURL"] == "https://api.example.com/v1"
    assert parse(manifest(**{k: v for k, v in dumped.items() if k != "model"})).spec == spec


@pytest.mark.parametrize("bad, field", [
    ({"replicas": {"min": 5, "max": 2}}, "replicas.min must be less than or equal to replicas.max"),
    ({"slo": {"ttftMs": 0}}, "spec.slo.ttftMs"),
    ({"slo": {"tpotMs": -5}}, "spec.slo.tpotMs"),
    ({"engine": {"runtime": "nonsense"}}, "spec.engine.runtime"),
    ({"resources": {"gpus": 2}}, "resources.gpus > 1 needs tensor parallelism"),
    ({"storage": {"modelClaim": {"name": "m", "path": "/abs"}}}, "storage.modelClaim.path must be relative"),
    ({"storage": {"modelClaim": {"name": "m", "path": "a/../../b"}}}, "storage.modelClaim.path must be relative"),
    ({"storage": {"modelClaim": {"path": "x"}}}, "spec.storage.modelClaim.name"),
    ({"storage": {"cacheSizeLimit": "lots"}}, "spec.storage.cacheSizeLimit"),
    ({"engine": {"hfTokenSecretRef": {"name": "hf"}}}, "spec.engine.hfTokenSecretRef.key"),
    ({"engine": {"env": [{"name": "A", "value": "b", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
     "env takes value or valueFrom, not both"),
    ({"engine": {"env": [{"name": "A", "valueFrom": {}}]}}, "exactly one of secretKeyRef and configMapKeyRef"),
    ({"resources": {"cpu": "two"}}, "spec.resources.cpu"),
    ({"rollout": {"maxSurge": "lots"}}, "rollout.maxSurge and rollout.maxUnavailable must be"),
    ({"rollout": {"maxUnavailable": -1}}, "rollout.maxSurge and rollout.maxUnavailable must be"),
    ({"autoscaling": {"mode": "keda"}}, "spec.autoscaling.mode"),
    ({"replicas": {"count": -1}}, "spec.replicas.count"),
    ({"modelShape": {"hiddenSize": 4096}}, "spec.modelShape.numLayers"),
    ({"overflow": {"enabled": True}}, "overflow.baseURL and overflow.apiKeySecretRef are required"),
    ({"overflow": {"enabled": True, "baseURL": "https://x/v1"}}, "overflow.apiKeySecretRef"),
    ({"engine": {"maxModelLen": 0}}, "spec.engine.maxModelLen"),
    ({"resources": {"gpus": -1}}, "spec.resources.gpus"),
    ({"engine": {"maxModelLength": 10}}, "spec.engine.maxModelLength"),
    ({"overflow": {"baseURL": "ftp://x"}}, "spec.overflow.baseURL"),
])
def test_bad_input_is_rejected_naming_the_field(bad, field):
    with pytest.raises(SpecError, match=None) as e:
        parse(manifest(**bad))
    assert field in str(e.value)


def test_overflow_disabled_needs_nothing():
    assert parse(manifest(overflow={"enabled": False})).spec.overflow.base_url is None


def test_name_and_kind_checks():
    with pytest.raises(SpecError, match="metadata.name must be at most 55"):
        parse({**manifest(), "metadata": {"name": "a" * 56}})
    with pytest.raises(SpecError, match="metadata.name"):
        parse({**manifest(), "metadata": {"name": "Bad_Name"}})
    with pytest.raises(SpecError, match="expected apiVersion"):
        parse({**manifest(), "kind": "Deployment"})
    with pytest.raises(SpecError, match="spec.model"):
        parse({"metadata": {"name": "x"}, "spec": {}})


def test_load_reports_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("spec: [unclosed")
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(SpecError, match="mapping"):
        load(tmp_path / "list.yaml")


def test_several_gpus_only_where_the_runtime_shards():
    assert parse(manifest(engine={"runtime": "vllm"}, resources={"gpus": 8})).spec.resources.gpus == 8
    assert parse(manifest(resources={"gpus": 1})).spec.resources.gpus == 1


def test_model_from_a_claim_serves_under_the_spec_name():
    spec = parse(manifest(storage={"modelClaim": {"name": "models", "path": "tiny-llama/"}})).spec
    assert spec.model_source == "/models/tiny-llama" and spec.model_name == "floodway/tiny-llama"
    root = parse(manifest(storage={"modelClaim": {"name": "models"}})).spec
    assert root.model_source == "/models"
    assert parse(manifest()).spec.model_source == "floodway/tiny-llama"


def test_requests_default_by_gpus_and_follow_the_spec():
    assert parse(manifest(resources={"gpus": 0})).spec.resources.requests() == {"cpu": "1", "memory": "2Gi"}
    assert parse(manifest(engine={"runtime": "vllm"}, resources={"gpus": 2})).spec.resources.requests() == {
        "cpu": "4", "memory": "16Gi"}
    assert parse(manifest(resources={"cpu": "500m", "memory": "3Gi"})).spec.resources.requests() == {
        "cpu": "500m", "memory": "3Gi"}
