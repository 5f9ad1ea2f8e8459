"""Strategic merge of a user's pod-template override onto the rendered one, as `kubectl patch` does for the
fields a pod template has: maps merge key by key, null deletes a key, lists of objects with a merge key in
Kubernetes' schema (containers by name, volumeMounts by mountPath, ...) merge item by item, other lists are
replaced. `$patch: replace` on a map, or an item `{$patch: delete, <key>: ...}`, does what Kubernetes does."""

from typing import Any

# The patchMergeKey of each list field of a pod template (k8s.io/api/core/v1 types.go).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
              "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ports": "containerPort",
              "imagePullSecrets": "name", "hostAliases": "ip", "resourceClaims": "name", "topologySpreadConstraints":
              "topologyKey"}


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    """base with patch merged in; neither is modified."""
    if isinstance(patch, dict) and isinstance(base, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, key)
            else:
                out[key] = strategic_merge({}, value, key) if isinstance(value, dict) else value
        return out
    if isinstance(patch, list) and isinstance(base, list) and field in MERGE_KEYS:
        return _merge_list(base, patch, MERGE_KEYS[field])
    return patch


def _merge_list(base: list, patch: list, key: str) -> list:
    out = list(base)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(item)  # no key to match by: added as written (the API server names what is missing)
            continue
        at = next((i for i, old in enumerate(out) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                out.pop(at)
        elif at is None:
            out.append(item)
        else:
            out[at] = strategic_merge(out[at], item)
    return out
