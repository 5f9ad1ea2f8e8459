"""The generated InferenceService CRD in a real API server: each bad spec is refused with a message naming the
field (schema or CEL) and the same spec is refused by the local parser (`floodway up`); defaults, `kubectl
explain`, the scale subresource and the printer columns work."""

import json
from pathlib import Path

import pytest
from floodway.operator.spec.resource import SpecError, parse

NS = "crd-tests"
REPO = Path(__file__).resolve().parents[2]


def manifest(name: str, **spec) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NS}, "spec": {"model": "floodway/tiny-llama", **spec}}


@pytest.fixture(scope="module")
def ns(cluster, floodway_crd):
    cluster.kubectl("create", "namespace", NS)
    yield NS
    cluster.kubectl("delete", "namespace", NS, "--timeout=60s")


KEY = {"name": "overflow-key", "key": "api-key"}
OVERFLOW_RULE = "overflow.baseURL and overflow.apiKeySecretRef are required when overflow.enabled is true"


@pytest.mark.parametrize("bad, message", [
    ({"replicas": {"min": 5, "max": 2}}, "replicas.min must be less than or equal to replicas.max"),
    ({"slo": {"ttftMs": 0}}, "spec.slo.ttftMs"),
    ({"slo": {"tpotMs": -5}}, "spec.slo.tpotMs"),
    ({"engine": {"runtime": "nonsense"}}, "spec.engine.runtime"),
    ({"overflow": {"enabled": True, "apiKeySecretRef": KEY}}, OVERFLOW_RULE),
    ({"overflow": {"enabled": True, "baseURL": "https://api.example.com/v1"}}, OVERFLOW_RULE),
    ({"engine": {"maxModelLen": 0}}, "spec.engine.maxModelLen"),
    ({"resources": {"gpus": -1}}, "spec.resources.gpus"),
    ({"resources": {"gpus": 2}}, "resources.gpus > 1 needs tensor parallelism"),
    ({"storage": {"modelClaim": {"name": "m", "path": "a/../../etc"}}}, "storage.modelClaim.path must be relative"),
    ({"storage": {"modelClaim": {"name": "m", "path": "/etc"}}}, "storage.modelClaim.path must be relative"),
    ({"engine": {"env": [{"name": "A", "value": "b", "valueFrom": {"secretKeyRef": KEY}}]}},
     "env takes value or valueFrom, not both"),
    ({"engine": {"env": [{"name": "A", "valueFrom": {}}]}}, "exactly one of secretKeyRef and configMapKeyRef"),
    ({"resources": {"cpu": "two"}}, "spec.resources.cpu"),
    ({"rollout": {"maxSurge": -1}}, "rollout.maxSurge and rollout.maxUnavailable must be"),
    ({"rollout": {"maxUnavailable": "half"}}, "rollout.maxSurge and rollout.maxUnavailable must be"),
    ({"autoscaling": {"mode": "keda"}}, "spec.autoscaling.mode"),
    ({"engine": {"quantization": "int3"}}, "spec.engine.quantization"),
    ({"engine": {"runtime": "llamacpp", "quantization": "int4"}}, "engine.runtime llamacpp takes engine.quantization"),
    ({"engine": {"runtime": "vllm", "quantization": "int8"}}, "engine.runtime vllm takes engine.quantization"),
    ({"engine": {"speculative": {"method": "draft_model", "numSpeculativeTokens": 2}}},
     "engine.speculative.model is required for method draft_model"),
    ({"engine": {"speculative": {"method": "ngram", "numSpeculativeTokens": 2, "promptLookupMin": 3,
                                 "promptLookupMax": 2}}}, "promptLookupMin must be less than or equal to"),
    ({"engine": {"speculative": {"method": "ngram", "numSpeculativeTokens": 17}}}, "numSpeculativeTokens up to 16"),
    ({"engine": {"runtime": "tgi", "speculative": {"method": "ngram", "numSpeculativeTokens": 2,
                                                   "promptLookupMax": 3}}}, "tgi takes no engine.speculative."),
    ({"engine": {"runtime": "sglang", "speculative": {"method": "ngram", "numSpeculativeTokens": 2}}},
     "engine.runtime sglang takes no engine.speculative"),
    ({"adapters": [{"name": "a", "source": "x"}, {"name": "a", "source": "y"}]},
     "adapters[].name must be unique and differ from the served model name"),
    ({"adapters": [{"name": "floodway/tiny-llama", "source": "x"}]},
     "adapters[].name must be unique and differ from the served model name"),
    ({"adapters": [{"name": "a", "source": "x"}], "engine": {"runtime": "tgi"}},
     "adapters are served by engine.runtime"),
    ({"gateway": {"tenants": {"limits": [{"name": "t"}, {"name": "t"}]}}},
     "gateway.tenants.limits[].name must be unique"),
    ({"classes": [{"name": "c"}, {"name": "c"}]}, "classes[].name must be unique"),
    ({"classes": [{"name": "c"}], "gateway": {"tenants": {"limits": [{"name": "t", "defaultClass": "d"}]}}},
     "gateway.tenants defaultClass must name one of classes[].name"),
    ({"gateway": {"tenants": {"default": {"defaultClass": "d"}}}},
     "gateway.tenants defaultClass must name one of classes[].name"),
], ids=["min>max", "ttft0", "tpot<0", "runtime", "no-baseURL", "no-key", "maxModelLen0", "gpus<0", "gpus>1-no-tp",
        "claim-dotdot", "claim-abs", "env-both", "env-none", "cpu", "surge", "unavailable", "mode", "quantization",
        "llamacpp-int4", "vllm-int8", "draft-no-model", "lookup-min>max", "spec-tokens>16", "tgi-lookup",
        "sglang-spec", "adapter-twice", "adapter-is-base", "adapter-tgi", "tenant-twice", "class-twice",
        "tenant-class-unknown", "default-class-unknown"])
def test_bad_spec_is_refused_by_the_api_server_and_by_the_local_parser(cluster, ns, bad, message):
    doc = manifest("bad", **bad)
    refused = cluster.kubectl("create", "-f", "-", input=json.dumps(doc), check=False)
    assert refused.returncode != 0, "the API server accepted a bad InferenceService"
    assert message in refused.stderr
    with pytest.raises(SpecError):
        parse(doc)
    assert cluster.kubectl("-n", ns, "get", "inferenceservice", "bad", check=False).returncode != 0


def test_defaults_explain_scale_and_printer_columns(cluster, ns):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest("defaults", resources={"gpus": 1})))
    spec = cluster.get("-n", ns, "fwis", "defaults")["spec"]  # the short name resolves too
    local = parse(manifest("defaults", resources={"gpus": 1})).spec
    assert spec["engine"]["runtime"] == local.engine.runtime == "floodway"
    assert spec["engine"]["blockSize"] == local.engine.block_size
    assert spec["replicas"] == {"min": local.replicas.min, "max": local.replicas.max, "count": 1}

    explained = cluster.kubectl("explain", "inferenceservice.spec").stdout
    assert "How each engine replica serves the model." in explained
    assert "Spill to an external OpenAI-compatible API." in explained
    assert "Fewest engine replicas" in cluster.kubectl("explain", "inferenceservice.spec.replicas.min").stdout
    claim = cluster.kubectl("explain", "inferenceservice.spec.storage.modelClaim").stdout
    assert "read-only at /models" in claim and "/models/<path>" in claim
    assert "HF_TOKEN" in cluster.kubectl("explain", "inferenceservice.spec.engine.hfTokenSecretRef").stdout
    # Free-form fields survive the API server's pruning.
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest("free", resources={"gpus": 1, "affinity": affinity},
                                                                  rollout={"maxSurge": "25%"})))
    stored = cluster.get("-n", ns, "fwis", "free")["spec"]
    assert stored["resources"]["affinity"] == affinity and stored["rollout"]["maxSurge"] == "25%"

    cluster.kubectl("-n", ns, "scale", "inferenceservice/defaults", "--replicas=3")
    assert cluster.get("-n", ns, "inferenceservice", "defaults")["spec"]["replicas"]["count"] == 3
    header = cluster.kubectl("-n", ns, "get", "inferenceservice", "defaults").stdout.splitlines()[0].split()
    assert header[:4] == ["NAME", "MODEL", "READY", "DESIRED"] and "URL" not in header
    wide = cluster.kubectl("-n", ns, "get", "inferenceservice", "defaults", "-o", "wide").stdout.splitlines()[0]
    assert "REASON" in wide.split() and "URL" in wide.split()


def test_a_spec_with_and_without_adapters_is_accepted(cluster, ns):
    # Without: the adapter rules must not read the absent list (a CEL error refuses the object).
    for doc in (manifest("no-adapters"), manifest("adapters", adapters=[{"name": "a", "source": "org/a-lora"}],
                                                   engine={"runtime": "vllm"})):
        parse(doc)
        cluster.kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))


def test_tenants_and_classes_are_accepted(cluster, ns):
    doc = manifest("tenants", classes=[{"name": "interactive", "priority": 0, "ttftMs": 300},
                                       {"name": "batch", "priority": 10, "overflow": False}],
                   gateway={"tenantsSecretRef": {"name": "tenants", "key": "tenants"},
                            "tenants": {"default": {"maxRequestsPerMinute": 60, "defaultClass": "batch"},
                                        "limits": [{"name": "app", "defaultClass": "interactive",
                                                    "maxConcurrentRequests": 8}]}})
    parse(doc)
    cluster.kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))


def test_each_runtime_accepts_the_quantization_and_speculation_it_honours(cluster, ns):
    for runtime, engine in [
            ("floodway", {"quantization": "int4", "speculative": {"method": "ngram", "numSpeculativeTokens": 16,
                                                                  "promptLookupMin": 1, "promptLookupMax": 3}}),
            ("vllm", {"quantization": "awq", "speculative": {"method": "draft_model", "numSpeculativeTokens": 20,
                                                             "model": "org/draft"}}),
            ("tgi", {"quantization": "gptq", "speculative": {"method": "ngram", "numSpeculativeTokens": 2}}),
            ("sglang", {"quantization": "fp8"}), ("llamacpp", {"quantization": "gguf"})]:
        doc = manifest(f"ok-{runtime}", engine={"runtime": runtime, **engine})
        parse(doc)
        cluster.kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))


def test_the_e2e_and_example_manifests_are_accepted(cluster, ns):
    paths = [REPO / "e2e" / "manifests" / "services.yaml", *sorted((REPO / "charts" / "floodway" / "examples").glob(
        "*.yaml"))]
    for path in paths:
        text = path.read_text().replace("NAMESPACE", ns)  # e2e/lib.sh fills in the namespace the same way
        cluster.kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", input=text)
