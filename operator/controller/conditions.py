"""Kubernetes conditions as plain dicts: set one, keeping lastTransitionTime while its status is unchanged,
and the events a change of conditions deserves."""

from dataclasses import dataclass

# Conditions whose turning True (or False, for the "good" ones) is worth a Warning event.
_GOOD = {"Ready", "FitsGPU", "OverflowKeyAvailable", "PodsHealthy", "StorageAvailable", "AdaptersReady",
         "OverflowBudget"}
_BAD = {"SLOAtRisk", "OwnershipConflict"}


def set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str, now: str,
                  generation: int | None = None) -> list[dict]:
    old = next((c for c in conditions if c["type"] == type_), None)
    since = old["lastTransitionTime"] if old and old["status"] == status and old.get("lastTransitionTime") else now
    new = {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}
    if generation is not None:
        new["observedGeneration"] = generation
    return [c for c in conditions if c["type"] != type_] + [new]


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


def transition_events(old: list[dict], new: list[dict]) -> list[Event]:
    """Events for conditions that changed status or reason (not for unchanged ones: no event spam)."""
    before = {c["type"]: c for c in old}
    events = []
    for c in new:
        prev = before.get(c["type"])
        if prev and prev["status"] == c["status"] and prev.get("reason") == c.get("reason"):
            continue
        bad = (c["type"] in _GOOD and c["status"] == "False") or (c["type"] in _BAD and c["status"] == "True")
        if prev is None and (not bad or c["type"] == "Ready"):
            continue  # a first healthy condition is not news, nor a new service that is not ready yet
        events.append(Event("Warning" if bad else "Normal", c["reason"] or c["type"], c["message"] or c["type"]))
    return events
