import pytest
from floodway.operator.crdgen.crd import build_crd
from floodway.operator.crdgen.files import render_yaml, stale_paths, write
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.base import SpecModel

pytestmark = pytest.mark.unit


def schema() -> dict:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: dict, path: str = ""):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_checked_in_crd_matches_the_models():
    stale = stale_paths()
    assert not stale, f"CRD drifted from floodway.operator.spec; run `floodway crd` to regenerate: {stale}"


def test_write_then_check_round_trip(tmp_path):
    assert len(stale_paths(tmp_path)) == 2
    write(tmp_path)
    assert stale_paths(tmp_path) == []
    (tmp_path / "crds" / next(p.name for p in (tmp_path / "crds").iterdir())).write_text("edited")
    assert len(stale_paths(tmp_path)) == 1


def test_schema_is_structural():
    for path, node in walk(schema()):
        assert "type" in node, f"{path} has no type"
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title"} & node.keys(), path
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict) and "properties" not in node, path


def test_every_spec_field_is_described():
    undescribed = [p for p, n in walk(schema()["properties"]["spec"], "spec")
                   if n["type"] != "object" and not p.endswith("[]") and "{" not in p and "description" not in n
                   and not any(p.startswith(f"spec.{s}") for s in ("engine.env", "resources.tolerations",
                                                                  "overflow.apiKeySecretRef"))]
    assert undescribed == []


def test_bad_input_rules_are_in_the_schema():
    spec = schema()["properties"]["spec"]["properties"]
    assert spec["replicas"]["x-kubernetes-validations"][0]["rule"] == "self.min <= self.max"
    assert "has(self.baseURL)" in spec["overflow"]["x-kubernetes-validations"][0]["rule"]
    ttft = spec["slo"]["properties"]["ttftMs"]
    assert ttft["minimum"] == 0 and ttft["exclusiveMinimum"] is True
    assert spec["engine"]["properties"]["runtime"]["enum"] == ["floodway", "vllm"]
    assert spec["engine"]["properties"]["maxModelLen"]["minimum"] == 1
    assert spec["resources"]["properties"]["gpus"]["minimum"] == 0
    assert schema()["required"] == ["spec"] and spec["model"]["minLength"] == 1


def test_defaults_match_the_model():
    spec = schema()["properties"]["spec"]["properties"]
    model = InferenceServiceSpec(model="m")
    assert spec["engine"]["properties"]["maxNumSeqs"]["default"] == model.engine.max_num_seqs
    assert spec["replicas"]["properties"]["max"]["default"] == model.replicas.max
    assert spec["engine"]["default"] == model.engine.dump() and "default" not in spec["servedModelName"]
    assert spec["replicas"]["default"] == {"min": 1, "max": 4}


def test_rules_cover_every_model_with_rules():
    # Every Python rule reaches the CRD: the API server and `floodway up` enforce the same set.
    text = render_yaml()
    for cls in SpecModel.__subclasses__():
        for rule in cls.RULES:
            assert rule.cel in text and rule.message in text


def test_subresources_columns_and_names():
    crd = build_crd()["spec"]
    version = crd["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas.min"
    assert "status" in version["subresources"]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:6] == [
        "Model", "Ready", "Desired", "Waiting", "SLO", "Overflow"]
    assert crd["names"]["shortNames"] == ["fwis"]
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_section_defaults_satisfy_their_cel_rules():
    # The API server evaluates a section's CEL rules on its default as written (no nested defaulting), so
    # every field a rule reads without has() must be in the default.
    import re

    spec = schema()["properties"]["spec"]["properties"]
    for name, section in spec.items():
        for rule in section.get("x-kubernetes-validations", []):
            guarded = set(re.findall(r"has\(self\.(\w+)\)", rule["rule"]))
            for field in set(re.findall(r"self\.(\w+)", rule["rule"])) - guarded:
                assert field in section["default"], f"spec.{name} default lacks {field} read by {rule['rule']}"
