"""Reading pod lists (plain dicts from the API): which engines are ready, and whether a gateway pod
cannot start because the overflow key's Secret is missing. The operator cannot read Secrets; the kubelet
reports a missing one in the container's waiting state, which the operator may read."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EnginePods:
    ready: dict[str, str]  # pod name -> pod IP
    starting: int


def _is_ready(pod: dict) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def engine_pods(pods: list[dict]) -> EnginePods:
    ready, starting = {}, 0
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue  # draining: no longer capacity
        ip = (pod.get("status") or {}).get("podIP")
        if _is_ready(pod) and ip:
            ready[pod["metadata"]["name"]] = ip
        elif (pod.get("status") or {}).get("phase") in ("Pending", "Running", None):
            starting += 1
    return EnginePods(ready, starting)


def any_ready(pods: list[dict]) -> bool:
    return any(_is_ready(p) and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)


def secret_problem(pods: list[dict], secret_name: str) -> str | None:
    """The kubelet's message when a gateway container waits for the named Secret (or one of its keys)."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            message = waiting.get("message") or ""
            if waiting.get("reason") == "CreateContainerConfigError" and f'"{secret_name}"' in message:
                return f"overflow API key unavailable: {message}"
    return None
