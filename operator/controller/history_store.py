"""A service's traffic history (autoscaler/history.py) kept in a ConfigMap, `<name>-history` in its namespace, so an
operator restart goes on with the weeks it had instead of a forecast that knows nothing for two days. Owned by the
InferenceService: deleting the service collects it. Pure: handlers.py reads and applies it."""

import logging
import math

from floodway.operator.autoscaler.history import History
from floodway.operator.controller.ownership import conflict
from floodway.operator.render.meta import Owner, metadata
from floodway.operator.version import __version__

log = logging.getLogger("floodway.operator")
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
    """The history in the ConfigMap as the API server returns it; none (a new service) or a damaged one: a new
    history, since the forecast treats the minutes it lacks as unknown rather than failing."""
    if live is None:
        return History()
    meta, text = live.get("metadata") or {}, (live.get("binaryData") or {}).get(KEY)
    try:
        if text is None:
            raise ValueError(f"no binaryData key {KEY!r}")
        return History.loads(text)
    except ValueError as e:
        log.warning("%s/%s: the saved traffic history is unreadable, starting a new one: %s",
                    meta.get("namespace"), meta.get("name"), e)
        return History()


def due(last_saved: float | None, now: float, bucket_s: float) -> bool:
    """Save at most once per bucket: when a new one began since the last save (or attempt), and at once when there
    was none, so the ConfigMap exists from the first tick. A restart loses at most the bucket under way."""
    return last_saved is None or math.floor(now / bucket_s) > math.floor(last_saved / bucket_s)
