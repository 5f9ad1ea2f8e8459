"""The operator adopts nothing: an object with a rendered object's name that this InferenceService does not
own (a user's Service of the same name, a leftover of a deleted service of the same name) is left alone and
named in a condition, instead of being taken over by a forced apply and deleted with the InferenceService."""


def conflict(rendered: dict, live: dict | None, uid: str) -> str | None:
    """Why `live` (the object now stored under `rendered`'s name, or None) must not be applied over, or None."""
    if live is None:
        return None
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    if any(r.get("uid") == uid for r in refs):
        return None
    meta = rendered["metadata"]
    owner = next((f"{r.get('kind')} {r.get('name')}" for r in refs if r.get("controller")), None)
    held = f"owned by {owner}" if owner else "not created by it"
    return (f"{rendered['kind']} {meta['namespace']}/{meta['name']} already exists, {held}; the operator does not "
            "adopt it (delete or rename it, or rename the InferenceService)")
