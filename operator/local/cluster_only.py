"""What `floodway up` cannot honour on one machine. One table of the fields that mean something only on a
cluster: the spec it runs leaves them out, and it says so in one warning line for each one a spec sets.
Secret references follow the local rule of the overflow key: $FLOODWAY_SECRET_<NAME>_<KEY> stands in for
the Secret."""

from collections.abc import Mapping
from dataclasses import dataclass

from floodway.operator.local.manifest import secret_env_name
from floodway.operator.spec import InferenceServiceSpec

_NO_IMAGES = "no image is pulled: the processes run this installation"
_NO_SCHEDULING = "one machine: nothing to schedule"
_NO_LIMITS = "no requests, limits or volume sizes: the processes share this machine"

# spec path (as written in the YAML) -> what happens locally instead
CLUSTER_ONLY: dict[str, str] = {
    "imagePullSecrets": _NO_IMAGES,
    "engine.image": _NO_IMAGES,
    "gateway.image": _NO_IMAGES,
    "engine.port": "each local engine listens on a free port of 127.0.0.1",
    "engine.podTemplate": "no pod: the engines are local processes",
    "resources.cpu": _NO_LIMITS,
    "resources.memory": _NO_LIMITS,
    "resources.nodeSelector": _NO_SCHEDULING,
    "resources.tolerations": _NO_SCHEDULING,
    "resources.affinity": _NO_SCHEDULING,
    "resources.priorityClassName": _NO_SCHEDULING,
    "resources.runtimeClassName": _NO_SCHEDULING,
    "gateway.replicas": "one local gateway",
    "gateway.apiKeysSecretRef": "the local gateway takes any client",
    "gateway.tenantsSecretRef": "the local gateway takes any client, as tenant anonymous (held to "
                                "gateway.tenants.default)",
    "storage.modelClaim": "the engines load spec.model",
    "storage.cacheClaim": "the cache is this machine's (FLOODWAY_CACHE, HF_HOME)",
    "storage.cacheSizeLimit": _NO_LIMITS,
    "storage.shmSizeLimit": _NO_LIMITS,
    "rollout": "no rollout: restart `floodway up` to apply a change",
    "networkPolicy": "the local engines listen on 127.0.0.1 only",
}


@dataclass(frozen=True)
class LocalSpec:
    spec: InferenceServiceSpec  # what `floodway up` runs
    warnings: tuple[str, ...]  # one line per field it leaves out


def _get(doc: dict, path: str):
    for key in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _drop(doc: dict, path: str) -> None:
    *parents, last = path.split(".")
    for key in parents:
        doc = doc.get(key, {})
    doc.pop(last, None)


def _secret(name: str, key: str, what: str, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the value from the environment, or the warning that there is none)."""
    var = secret_env_name(name, key)
    if env.get(var):
        return env[var], None
    return None, f"{what}: Secret {name}/{key} is not available locally ({var} is not set): left unset"


def local_spec(spec: InferenceServiceSpec, env: Mapping[str, str]) -> LocalSpec:
    """The spec without its cluster-only fields (a field left at its default says nothing), engine env
    valueFrom resolved where the environment can stand in for the Secret, and the warnings."""
    doc, default = spec.dump(), InferenceServiceSpec(model=spec.model).dump()
    warnings = []
    for path, instead in CLUSTER_ONLY.items():
        if _get(doc, path) != _get(default, path):
            warnings.append(f"spec.{path}: ignored by `floodway up`: {instead}")
            _drop(doc, path)
    engine = doc.setdefault("engine", {})
    variables = []
    for var in engine.get("env", []):
        source, what = var.get("valueFrom"), f"spec.engine.env[{var['name']}].valueFrom"
        if source is None:
            variables.append(var)
        elif "secretKeyRef" in source:
            value, warning = _secret(source["secretKeyRef"]["name"], source["secretKeyRef"]["key"], what, env)
            variables += [{"name": var["name"], "value": value}] if value is not None else []
            warnings += [warning] if warning else []
        else:
            ref = source["configMapKeyRef"]
            warnings.append(f"{what}: ignored by `floodway up`: ConfigMap {ref['name']}/{ref['key']} is not read "
                            "locally (give value instead)")
    token = engine.pop("hfTokenSecretRef", None)
    if token:
        value, warning = _secret(token["name"], token["key"], "spec.engine.hfTokenSecretRef", env)
        variables += [{"name": "HF_TOKEN", "value": value}] if value is not None else []
        warnings += [warning + " (HF_TOKEN from your environment still reaches the engines)"] if warning else []
    engine["env"] = variables
    return LocalSpec(InferenceServiceSpec.model_validate(doc), tuple(warnings))


def engine_env(spec: InferenceServiceSpec) -> dict[str, str]:
    """The engine processes' extra environment: a local spec's env, every variable with a value."""
    return {v.name: v.value for v in spec.engine.env if v.value is not None}
