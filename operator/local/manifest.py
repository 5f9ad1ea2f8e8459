"""The manifest `floodway up` runs: the user's YAML or the built-in default, the optional local stand-in
for the overflow API, and the overflow key looked up the local way (an environment variable)."""

import copy
import os
import re

from floodway.operator.spec import API_VERSION, KIND, InferenceService, SpecError, parse

LOCAL_OVERFLOW_SECRET = {"name": "local-overflow", "key": "api-key"}

DEFAULT_MANIFEST = {
    "apiVersion": API_VERSION, "kind": KIND,
    "metadata": {"name": "smollm2"},
    "spec": {
        "model": "floodway/smollm2-135m-instruct",  # a real small chat model, shipped offline (engine/models)
        "engine": {"maxModelLen": 2048, "maxNumSeqs": 8},
        "resources": {"gpus": 0},
        "replicas": {"min": 1, "max": 3},
        "slo": {"ttftMs": 2000, "tpotMs": 200},
        "autoscaling": {"intervalSeconds": 2, "targetConcurrency": 4, "scaleUpWindowSeconds": 4,
                        "panicHoldSeconds": 10, "scaleDownStabilizationSeconds": 30,
                        "scaleDownIntervalSeconds": 10},
        "overflow": {"maxWaitingPerReplica": 4},  # enabled, pointing at the local stand-in, by `floodway up`
    },
}


def with_local_overflow(doc: dict, base_url: str) -> dict:
    """Points overflow at the local stand-in engine (keeping the manifest's other overflow settings)."""
    doc = copy.deepcopy(doc)
    overflow = doc.setdefault("spec", {}).setdefault("overflow", {})
    overflow.update(enabled=True, baseURL=base_url)
    overflow.setdefault("apiKeySecretRef", dict(LOCAL_OVERFLOW_SECRET))
    return doc


def local_checks(obj: InferenceService) -> InferenceService:
    """What the cluster could run but one machine cannot: say so before starting anything."""
    if obj.spec.engine.runtime != "floodway":
        raise SpecError(f"spec.engine.runtime: `floodway up` runs the floodway runtime only, got "
                        f"{obj.spec.engine.runtime!r} (deploy it to a cluster instead)")
    if obj.spec.replicas.max > 16:
        raise SpecError("spec.replicas.max: `floodway up` runs at most 16 local engine replicas")
    return obj


def secret_env_name(name: str, key: str) -> str:
    return "FLOODWAY_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{name}_{key}").upper()


def overflow_key(obj: InferenceService, env=None) -> str | None:
    """The overflow API key for a local run: $FLOODWAY_SECRET_<NAME>_<KEY> stands in for the Secret."""
    env = os.environ if env is None else env
    o = obj.spec.overflow
    if not o.enabled or o.api_key_secret_ref is None:
        return None
    ref = o.api_key_secret_ref
    if ref.name == LOCAL_OVERFLOW_SECRET["name"]:
        return "local"  # the stand-in engine needs no key
    var = secret_env_name(ref.name, ref.key)
    if not env.get(var):
        raise SpecError(f"spec.overflow.apiKeySecretRef: Secret {ref.name}/{ref.key} is not available locally; "
                        f"set {var} to the API key")
    return env[var]


def build(doc: dict, local_overflow_url: str | None = None) -> InferenceService:
    if local_overflow_url:
        doc = with_local_overflow(doc, local_overflow_url)
    return local_checks(parse(doc))
