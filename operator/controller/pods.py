"""Reading pod lists (plain dicts from the API): which engines are ready, and why a pod cannot start (a
missing Secret or key, an image that cannot be pulled, a crash loop, no node that fits). The operator cannot
read Secrets; the kubelet reports a missing one in the container's waiting state, which the operator may read."""

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


# Waiting reasons that will not clear by themselves; ContainerCreating and PodInitializing are progress.
STUCK = ("CreateContainerConfigError", "CreateContainerError", "ImagePullBackOff", "ErrImagePull",
         "ErrImageNeverPull", "InvalidImageName", "CrashLoopBackOff", "RunContainerError")


def _waiting(pod: dict):
    """(container name, reason, message) of each container of the pod waiting for a stuck reason."""
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK:
            yield cs.get("name", "?"), waiting["reason"], waiting.get("message") or ""


def _unschedulable(pod: dict) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c.get("message") or "no node fits the pod"
    return None


@dataclass(frozen=True)
class PodProblem:
    reason: str  # the kubelet's or scheduler's reason, e.g. CreateContainerConfigError
    message: str  # names the pod, the container and what is missing


def pod_problems(pods: list[dict], component: str) -> list[PodProblem]:
    """What keeps pods of one component from running, one entry per distinct problem (the first pod's name,
    and how many pods share it)."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        name = (pod.get("metadata") or {}).get("name", "?")
        for container, reason, message in _waiting(pod):
            found.setdefault((reason, f"container {container}", message), []).append(name)
        if (message := _unschedulable(pod)) is not None:
            found.setdefault(("Unschedulable", "not scheduled", message), []).append(name)
    out = []
    for (reason, what, message), names in found.items():
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        out.append(PodProblem(reason, f"{component} pod {names[0]}{more}: {what} {reason}: {message}".rstrip(": ")))
    return out


def secret_problem(pods: list[dict], secret_name: str) -> str | None:
    """The kubelet's message when a gateway container waits for the named Secret (or one of its keys)."""
    for pod in pods:
        for _, reason, message in _waiting(pod):
            if reason == "CreateContainerConfigError" and f'"{secret_name}"' in message:
                return f"overflow API key unavailable: {message}"
    return None
