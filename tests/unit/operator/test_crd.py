from floodway.operator.crdgen.crd import build_crd
from floodway.operator.crdgen.files import render_yaml, stale_paths, write
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.base import SpecModel


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
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title"} & node.keys(), path
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict) and "properties" not in node, path


def test_every_spec_field_is_described():
    undescribed = [p for p, n in walk(schema()["properties"]["spec"], "spec")
                   if not p.endswith("[]") and "{" not in p and "description" not in n]
    assert undescribed == []


def test_bad_input_rules_are_in_the_schema():
    spec = schema()["properties"]["spec"]["properties"]
    assert spec["replicas"]["x-kubernetes-validations"][0]["rule"] == "self.min <= self.max"
    assert "has(self.baseURL)" in spec["overflow"]["x-kubernetes-validations"][0]["rule"]
    ttft = spec["slo"]["properties"]["ttftMs"]
    assert ttft["minimum"] == 0 and ttft["exclusiveMinimum"] is True
    assert spec["engine"]["properties"]["runtime"]["enum"][:2] == ["floodway", "vllm"]
    assert spec["engine"]["properties"]["maxModelLen"]["minimum"] == 1
    assert spec["resources"]["properties"]["gpus"]["minimum"] == 0
    assert schema()["required"] == ["spec"] and spec["model"]["minLength"] == 1


def test_defaults_match_the_model():
    spec = schema()["properties"]["spec"]["properties"]
    model = InferenceServiceSpec(model="m")
    assert spec["engine"]["properties"]["maxNumSeqs"]["default"] == model.engine.max_num_seqs
    assert spec["replicas"]["properties"]["max"]["default"] == model.replicas.max
    assert spec["engine"]["default"] == model.engine.dump() and "default" not in spec["servedModelName"]
    assert spec["replicas"]["default"] == {"min": 1, "max": 4, "count": 1}


def test_rules_cover_every_model_with_rules():
    # Every Python rule reaches the CRD: the API server and `floodway up` enforce the same set.
    import yaml

    crd = yaml.safe_load(render_yaml())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    in_crd = {(v["rule"], v["message"]) for _, node in walk(crd) for v in node.get("x-kubernetes-validations", [])}
    rules = [rule for cls in SpecModel.__subclasses__() for rule in cls.RULES]
    assert len(rules) >= 6
    for rule in rules:
        assert (rule.cel, rule.message) in in_crd, rule.message


def test_subresources_columns_and_names():
    crd = build_crd()["spec"]
    version = crd["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas.count"
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


def test_free_form_fields_keep_what_the_user_wrote():
    # Without preserve-unknown-fields the API server would prune affinity and the pod template to {}.
    spec = schema()["properties"]["spec"]["properties"]
    for node in (spec["resources"]["properties"]["affinity"], spec["engine"]["properties"]["podTemplate"],
                 spec["networkPolicy"]["properties"]["allowFrom"]["items"]):
        assert node["type"] == "object" and node["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["rollout"]["properties"]["maxSurge"] == {
        "x-kubernetes-int-or-string": True, "description": spec["rollout"]["properties"]["maxSurge"]["description"]}


def test_storage_and_scaling_fields_are_explained():
    # What `kubectl explain inferenceservice.spec.storage` and friends show.
    spec = schema()["properties"]["spec"]["properties"]
    storage = spec["storage"]["properties"]
    assert "mounted read-only at /models" in storage["modelClaim"]["properties"]["name"]["description"]
    assert "/models/<path>" in storage["modelClaim"]["properties"]["path"]["description"]
    assert "HF_HOME" in storage["cacheClaim"]["description"]
    assert "HF_TOKEN" in spec["engine"]["properties"]["hfTokenSecretRef"]["description"]
    assert "valueFrom" in spec["engine"]["properties"]["env"]["items"]["properties"]["valueFrom"]["description"] or \
        "Secret" in spec["engine"]["properties"]["env"]["items"]["properties"]["valueFrom"]["description"]
    assert spec["autoscaling"]["properties"]["mode"]["enum"] == ["floodway", "external"]
    assert "scale subresource" in spec["replicas"]["properties"]["count"]["description"]
    assert "pattern" in spec["resources"]["properties"]["cpu"]
