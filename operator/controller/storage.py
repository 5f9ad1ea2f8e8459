"""The claims a spec mounts and what is wrong with them, from the PersistentVolumeClaims as the API returns
them (the operator may read claims; it never reads Secrets). A claim still Pending is not judged here: with
WaitForFirstConsumer binding that is normal until a pod is scheduled, and a claim that cannot bind shows as the
scheduler's Unschedulable message on the pods."""

from floodway.operator.spec import InferenceServiceSpec


def claim_roles(spec: InferenceServiceSpec) -> dict[str, str]:
    """Claim name -> the spec field that names it."""
    s, roles = spec.storage, {}
    if s.cache_claim:
        roles[s.cache_claim.name] = "storage.cacheClaim"
    if s.model_claim:
        roles[s.model_claim.name] = "storage.modelClaim"
    return roles


def claim_problems(spec: InferenceServiceSpec, namespace: str, claims: dict[str, dict | None]) -> list[str]:
    """claims: name -> the PVC object, or None when it does not exist. One message per claim not usable."""
    problems = []
    for name, role in claim_roles(spec).items():
        pvc = claims.get(name)
        if pvc is None:
            problems.append(f"{role}: PersistentVolumeClaim {namespace}/{name} not found (the engine pods stay "
                            "Pending until it exists)")
        elif (pvc.get("status") or {}).get("phase") == "Lost":
            problems.append(f"{role}: PersistentVolumeClaim {namespace}/{name} lost its volume")
    return problems
