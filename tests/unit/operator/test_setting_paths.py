"""Every spec field reaches what it configures under its own name: an engine flag (`--max-num-seqs` for
engine.maxNumSeqs), a gateway config field (routing.prefix_load_cap for gateway.routing.prefixLoadCap), an
autoscaler policy field (kv_cache_target for autoscaling.kvCacheTarget; replicas_min for replicas.min), or, for the
fields listed below with their reason, a rendered Kubernetes object or another named reader.

The oracle is a perturbation: each field (recursively, list items included) is set to another valid value and the
targets are recomputed; the test fails for a field that changes nothing, or that changes a target of another name
not listed (with its reason) in DERIVED."""

import dataclasses
import json
import types
import typing
from typing import Any, Literal

import pytest
from floodway.operator.controller.scaling import autoscaler_policy
from floodway.operator.planner.fit import spec_fit
from floodway.operator.planner.prices import spec_prices
from floodway.operator.render import Images, Owner, render
from floodway.operator.render.engine import engine_args
from floodway.operator.render.gateway import gateway_config
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.base import SpecModel
from pydantic import ValidationError

SECRET = {"name": "s", "key": "k"}
# The spec the perturbations start from: every optional section present, so its fields have something to change.
BASE = {
    "model": "org/model",
    "engine": {"env": [{"name": "A", "value": "1"}], "hfTokenSecretRef": SECRET,
               "speculative": {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 2,
                               "promptLookupMax": 4}},
    "resources": {"gpuType": "l4", "tolerations": [{"key": "k", "operator": "Equal", "value": "v",
                                                   "effect": "NoSchedule", "tolerationSeconds": 5}]},
    "modelShape": {"hiddenSize": 4096, "numLayers": 32, "numHeads": 32, "numKvHeads": 8, "vocabSize": 128000,
                   "intermediateSize": 14336, "maxPositionEmbeddings": 8192},
    "overflow": {"enabled": True, "baseURL": "https://api.example/v1", "model": "small", "apiKeySecretRef": SECRET,
                 "maxRequestsPerMinute": 60, "maxTokensPerMinute": 6000},
    "gateway": {"apiKeysSecretRef": SECRET, "tenantsSecretRef": SECRET, "tenants": {"limits": [{"name": "batch"}]}},
    "storage": {"modelClaim": {"name": "weights", "path": "m"}, "cacheClaim": {"name": "cache"}},
    "rollout": {"maxSurge": 1, "maxUnavailable": 1},
    "networkPolicy": {"allowFrom": [{"namespaceSelector": {}}]},
    "adapters": [{"name": "support", "source": "adapters/support"}],
    "classes": [{"name": "batch", "priority": 5, "ttftMs": 5000}],
}
# Fields whose effect needs another setting first (path: changes to BASE).
CONTEXT = {
    ("model",): {"storage": {"modelClaim": None}},
    ("storage", "cache_size_limit"): {"storage": {"cacheClaim": None}},
    ("replicas", "count"): {"autoscaling": {"mode": "external"}},
    ("engine", "env", "[]", "value_from", "secret_key_ref"): {"engine": {"env": [{"name": "A", "valueFrom": {
        "secretKeyRef": SECRET}}]}},
    ("engine", "env", "[]", "value_from", "config_map_key_ref"): {"engine": {"env": [{"name": "A", "valueFrom": {
        "configMapKeyRef": SECRET}}]}},
    ("resources", "gpu_memory_gib"): {"resources": {"gpuType": None}},
    ("engine", "speculative", "model"): {"engine": {"speculative": {
        "method": "draft_model", "model": "org/draft", "promptLookupMin": None, "promptLookupMax": None}}},
}
# Fields whose other value needs sibling fields changed with it (path: {sibling: value}).
SIBLINGS = {("engine", "speculative", "method"): {"model": "org/draft", "prompt_lookup_min": None,
                                                  "prompt_lookup_max": None}}
SAMPLES = {  # values for fields a generic guess cannot make valid
    ("engine", "extra_args"): ["--seed", "1"],
    ("engine", "pod_template"): {"metadata": {"labels": {"team": "a"}}},
    ("resources", "node_selector"): {"pool": "gpu"},
    ("resources", "affinity"): {"podAntiAffinity": {}},
    ("resources", "memory"): "3Gi", ("resources", "cpu"): "3",
    ("resources", "gpu_type"): "h100-80gb",
    ("storage", "cache_size_limit"): "3Gi", ("storage", "shm_size_limit"): "3Gi",
    ("storage", "model_claim", "path"): "other",
    ("network_policy", "allow_from"): [{"podSelector": {}}],
    ("overflow", "base_url"): "https://other.example/v1",
    ("image_pull_secrets",): ["regcred"],
    ("model_shape", "max_position_embeddings"): 2048,  # below engine.maxModelLen
    ("overflow", "models"): {"support": "small-support"},
    ("gateway", "tenants", "default", "default_class"): "batch",  # one of BASE's classes
    ("gateway", "tenants", "limits", "[]", "default_class"): "batch",
    ("classes", "[]", "name"): "bulk",
}

# Fields that reach a target of another name by a rule of the spec's (path, target): why.
DERIVED = {
    (("model",), "flag:served_model_name"): "the served name defaults to the model",
    (("model",), "gateway:served_models"): "the gateway lists the served name",
    (("served_model_name",), "gateway:served_models"): "the gateway lists the served name",
    (("engine", "runtime"), "flag:*"): "each runtime has its own command line (render/runtime_args.py)",
    (("engine", "extra_args"), "flag:*"): "appended to the engine's command line as written",
    (("engine", "max_num_seqs"), "policy:target_concurrency"): "targetConcurrency unset: a share of the batch",
    (("engine", "termination_grace_period_seconds"), "flag:drain_timeout"): "the engine drains within the grace",
    (("slo", "tpot_ms"), "flag:tpot_slo_ms"): "the engine's own flag for the TPOT it protects",
    (("engine", "speculative"), "flag:speculative_config"): "vLLM's JSON flag, keyed by the fields' snake_case names",
    (("overflow", "enabled"), "policy:overflow_share"): "an overflow budget only where the service overflows",
    (("autoscaling", "priority"), "gateway:overflow.max_share"): "priority budget: the gateway caps overflow at "
                                                                 "autoscaling.overflowShare",
    (("overflow", "enabled"), "gateway:*"): "the connection settings pass only when overflow is on",
    (("overflow", "model"), "gateway:overflow.api_key_env"): "",
    (("storage", "model_claim"), "flag:model"): "a model on a claim loads from its mount",
    (("storage", "model_claim", "path"), "flag:model"): "a model on a claim loads from its mount",
    (("adapters", "[]", "name"), "flag:lora_modules"): "each adapter is a name=path item of --lora-modules",
    (("adapters", "[]", "source"), "flag:lora_modules"): "each adapter is a name=path item of --lora-modules",
    (("adapters", "[]", "name"), "gateway:served_models"): "the gateway serves the adapters' names too",
    (("overflow", "models"), "gateway:overflow.models.support"): "the mapping, flattened to one key per model",
    (("gateway", "tenants", "limits"), "gateway:tenants.limits"): "the list of tenants passes whole (one value)",
    (("classes",), "gateway:classes"): "the list of classes passes whole (one value)",
    (("classes",), "policy:class_caps"): "the classes' caps, as (class, maxReplicas) pairs",
    (("classes", "[]", "name"), "policy:class_caps"): "the classes' caps, as (class, maxReplicas) pairs",
    (("classes", "[]", "max_replicas"), "policy:class_caps"): "the classes' caps, as (class, maxReplicas) pairs",
}
# Fields no engine flag, gateway config or policy field has: only the renderer reads them, into the Kubernetes
# objects (path: what they become there). The test checks that the rendered objects change.
RENDERED = {
    ("image_pull_secrets",): "the pods' imagePullSecrets",
    ("engine", "image"): "the engine container's image",
    ("engine", "startup_timeout_seconds"): "the startup probe's failureThreshold",
    ("engine", "termination_grace_period_seconds"): "the engine pod's terminationGracePeriodSeconds",
    ("engine", "extra_args"): "appended to the engine container's args as written",
    ("engine", "env"): "the engine container's env",
    ("engine", "hf_token_secret_ref"): "HF_TOKEN from the Secret",
    ("engine", "pod_template"): "merged over the engine pod template",
    ("resources",): "the engine container's resources, node selection and scheduling",
    ("replicas", "count"): "the Deployment's replicas (autoscaling.mode external)",
    ("autoscaling", "enabled"): "the Deployment's replicas (replicas.min when off)",
    ("autoscaling", "mode"): "the Deployment's replicas (replicas.count when external)",
    ("overflow", "api_key_secret_ref"): "the gateway's overflow API key env from the Secret",
    ("gateway", "replicas"): "the gateway Deployment's replicas and PodDisruptionBudget",
    ("gateway", "image"): "the gateway container's image",
    ("gateway", "api_keys_secret_ref"): "the client keys file mounted from the Secret",
    ("gateway", "tenants_secret_ref"): "the tenants file mounted from the Secret",
    ("storage",): "volumes, mounts and the model path",
    ("rollout",): "the engine Deployment's rolling update strategy",
    ("network_policy",): "the engine NetworkPolicy",
}
# Fields read elsewhere (path: the reader).
OTHER = {
    ("model_shape",): ("the FitsGPU check (planner.fit.spec_fit)", spec_fit),
    ("resources", "gpu_memory_gib"): ("the FitsGPU check (planner.fit.spec_fit)", spec_fit),
    ("engine", "speculative"): ("the engine's --speculative-config JSON",
                                lambda s: _flags(s).get("speculative_config")),
    ("resources", "gpu_hourly_price"): ("the cost figures (planner.prices.spec_prices)", spec_prices),
    ("overflow", "pricing"): ("the cost figures (planner.prices.spec_prices)", spec_prices),
    ("adapters",): ("the engine's --lora-modules name=path items", lambda s: _flags(s).get("lora_modules")),
    ("overflow", "models"): ("the gateway's overflow.models (a mapping)",
                             lambda s: gateway_config(s, {"static": []}, 0)["overflow"].get("models")),
    ("classes",): ("the gateway's classes (a list)", lambda s: gateway_config(s, {"static": []}, 0)["classes"]),
    ("gateway", "tenants", "limits"): ("the gateway's tenants.limits (a list)",
                                       lambda s: gateway_config(s, {"static": []}, 0)["tenants"]["limits"]),
}


def _inner(annotation) -> tuple[Any, bool]:
    """The annotation without None, and whether it is a list of it."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], True
    return annotation, False


def spec_paths(model=InferenceServiceSpec, prefix=()) -> list[tuple]:
    """Every setting's path, recursively through sections and list items ("[]": a list's first item)."""
    out = []
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        inner, is_list = _inner(info.annotation)
        if isinstance(inner, type) and issubclass(inner, SpecModel):
            out += spec_paths(inner, (*path, "[]") if is_list else path)
        else:
            out.append(path)
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _get(d, path):
    for p in path:
        d = d[0] if p == "[]" else d[p]
    return d


def _set(d, path, value):
    for p in path[:-1]:
        d = d[0] if p == "[]" else d[p]
    d[path[-1]] = value


def _field(path):
    model = InferenceServiceSpec
    for p in path[:-1]:
        if p != "[]":
            model = _inner(model.model_fields[p].annotation)[0]
    return model.model_fields[path[-1]]


def _candidates(path, current):
    if path in SAMPLES:
        return [SAMPLES[path]]
    annotation, _ = _inner(_field(path).annotation)
    if typing.get_origin(annotation) is Literal:
        return [v for v in typing.get_args(annotation) if v != current]
    if isinstance(current, bool) or annotation is bool:
        return [not current]
    if isinstance(current, (int, float)) and current is not None:
        return [current * 0.5, current + 1, current * 2, current - 1]
    if current is None and annotation in (int, float):
        return [2, 0.5]
    if isinstance(current, str) or annotation is str:
        return ["other", "other-2"]
    return [1, 2, "25%"]


def perturbed(path) -> tuple[InferenceServiceSpec, InferenceServiceSpec]:
    """(the base spec, the same with this field set to another valid value)."""
    context = CONTEXT.get(_listed(CONTEXT, path), {})
    base = InferenceServiceSpec.model_validate(_merge(BASE, context))
    data = base.model_dump()
    current = _get(data, path)
    for value in _candidates(path, current):
        if value == current:
            continue
        _set(data, path, value)
        for name, sibling in SIBLINGS.get(path, {}).items():
            _set(data, (*path[:-1], name), sibling)
        try:
            return base, InferenceServiceSpec.model_validate(data)
        except ValidationError:
            continue
    raise AssertionError(f"no valid other value for {'.'.join(path)}: add one to SAMPLES")


def _flags(spec) -> dict:
    """{flag as a snake_case name: its value}; a switch --x is x: True, --no-x is x: False."""
    args, out, i = engine_args(spec, "0.0.0.0", spec.engine.port), {}, 0
    while i < len(args):
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        name = args[i].lstrip("-").replace("-", "_")
        if value is None:
            name, value = (name[3:], False) if name.startswith("no_") else (name, True)
        out[name] = value
        i += 1 if isinstance(value, bool) else 2
    return out


def _flat(d: dict, prefix="") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def targets(spec) -> dict[str, Any]:
    """Every named target: engine flags, gateway config fields, autoscaler policy fields."""
    out = {f"flag:{k}": v for k, v in _flags(spec).items()}
    out |= {f"gateway:{k}": v for k, v in _flat(gateway_config(spec, {"static": []}, 0)).items()}
    out |= {f"policy:{k}": v for k, v in dataclasses.asdict(autoscaler_policy(spec)).items()}
    return out


def same_name(path, target: str) -> bool:
    p = [s for s in path if s != "[]"]
    kind, key = target.split(":", 1)
    names = {"_".join(p), ".".join(p)}
    if kind == "flag" and p[0] == "engine" or kind == "policy" and p[0] == "autoscaling":
        names.add(p[-1])
    if kind == "gateway" and p[0] == "gateway":
        names.add(".".join(p[1:]))
    return key in names


def _rendered(spec) -> str:
    return json.dumps(render(spec, Owner("svc", "ns"), Images(), replicas=3), sort_keys=True)


def _listed(table, path):
    """The longest prefix of `path` that `table` lists, or None."""
    return next((path[:n] for n in range(len(path), 0, -1) if path[:n] in table), None)


@pytest.mark.parametrize("path", spec_paths(), ids=lambda p: ".".join(p))
def test_each_spec_field_reaches_its_namesake(path):
    base, changed = perturbed(path)
    before, after = targets(base), targets(changed)
    moved = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    named = {k for k in moved if same_name(path, k)}
    other = {k for k in moved - named
             if not any((path[:n], t) in DERIVED for n in range(1, len(path) + 1)
                        for t in (k, k.split(":")[0] + ":*"))}
    assert not other, f"{'.'.join(path)} reaches {sorted(other)}: another name (rename it, or list it in DERIVED)"
    if named:
        return
    if (key := _listed(OTHER, path)) is not None:
        reason, reader = OTHER[key]
        assert reader(base) != reader(changed), f"{'.'.join(path)} does not change {reason}"
        return
    if (key := _listed(RENDERED, path)) is not None:
        assert _rendered(base) != _rendered(changed), f"{'.'.join(path)} ({RENDERED[key]}) changes no object"
        return
    pytest.fail(f"{'.'.join(path)} reaches nothing: no engine flag, gateway config or policy field of its name, "
                "and not in RENDERED or OTHER")


def test_the_walk_covers_nested_and_list_fields():
    paths = spec_paths()
    assert ("gateway", "routing", "prefix_load_cap") in paths
    assert ("engine", "env", "[]", "value_from", "secret_key_ref", "name") in paths
    assert len(paths) > 80 and ("engine",) not in paths  # sections are walked through, not set whole
