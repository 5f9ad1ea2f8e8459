"""A service's traffic history (autoscaler/history.py) kept in a ConfigMap, `<name>-history` in its namespace, so an
operator restart goes on with the weeks it had instead of a forecast that knows nothing for two days. Owned by the
InferenceService: deleting the service collects it. Pure: handlers.py reads and applies it."""

import math

from floodway.operator.autoscaler.history import History, restore
from floodway.operator.controller.ownership import conflict
from floodway.operator.render.meta import Owner, metadata
from floodway.operator.version import __version__

KEY = "history"  # the binaryData key: History.dumps() is base64 already, as binaryData wants it
COMPONENT = "autoscaler"  # the autoscaler's memory, not a part of the serving path


def history_name(owner: Owner) -> str:
    return f"{owner.name}-history"


def history_configmap(owner: Owner, history: History) -> dict:
    """The ConfigMap to apply (server-side) with `history` in it."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(owner, history_name(owner), COMPONENT, __version__),
            "binaryData": {KEY: history.dumps()}}


def history_conflict(live: dict | None, owner: Owner) -> str | None:
    """Why the ConfigMap stored under the history's name is neither read nor written over (the operator adopts
    nothing: ownership.py), or None when it is this service's or there is none."""
    return conflict(history_configmap(owner, History()), live, owner.uid)


def saved_history(live: dict | None) -> History:
    """The history in the ConfigMap as the API server returns it (history.restore: none or a damaged one, a new one)."""
    meta = (live or {}).get("metadata") or {}
    text = ((live or {}).get("binaryData") or {}).get(KEY)
    if live is not None and text is None:
        text = ""  # a ConfigMap without the key is a damaged one: restore says so
    return restore(text, f"ConfigMap {meta.get('namespace')}/{meta.get('name')}")


def due(last_saved: float | None, now: float, bucket_s: float) -> bool:
    """Save at most once per bucket: when a new one began since the last save (or attempt), and at once when there
    was none, so the ConfigMap exists from the first tick. A restart loses at most the bucket under way."""
    return last_saved is None or math.floor(now / bucket_s) > math.floor(last_saved / bucket_s)
