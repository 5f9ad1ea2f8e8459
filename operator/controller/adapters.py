"""LoRA adapters per engine replica (pure): what an engine's /v1/models lists (adapters are the cards with a
`parent`, their base model, as vLLM and our engine list them), why a startup adapter did not load (our engine's
/debug/engine `failed_lora_adapters`; other runtimes give no reason), and the status and AdaptersReady condition
they make. A bad adapter is the adapter's problem, not the service's: Ready does not look at it."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CONDITION = "AdaptersReady"
NAMED = 3  # adapters, and replicas per adapter, a condition message names (the rest are counted): a bounded message
UNLISTED = "the engine does not list it in /v1/models"


@dataclass(frozen=True)
class ReplicaAdapters:
    """What one ready replica said: the adapters it serves, and (name, reason) per startup adapter that failed."""

    loaded: tuple[str, ...]
    failed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AdapterReport:
    replicas: list[dict]  # status.adapters
    condition: tuple[str, str, str] | None  # (status, reason, message); None: no replica to judge by


def listed_adapters(models) -> tuple[str, ...]:
    """The adapter names in a /v1/models body, sorted. ValueError for a body of another shape."""
    try:
        return tuple(sorted(str(m["id"]) for m in models["data"] if m.get("parent")))
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a /v1/models body: {e!r}") from None


def failed_adapters(debug) -> tuple[tuple[str, str], ...]:
    """(name, reason) per entry of a /debug/engine body's failed_lora_adapters. ValueError for another shape."""
    try:
        return tuple((str(f["name"]), str(f["reason"])) for f in debug.get("failed_lora_adapters") or ())
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a /debug/engine body: {e!r}") from None


def _names(items: list[str]) -> str:
    more = f" and {len(items) - NAMED} more" if len(items) > NAMED else ""
    return ", ".join(items[:NAMED]) + more


def adapter_report(wanted: Sequence[str], replicas: Mapping[str, ReplicaAdapters]) -> AdapterReport:
    """status.adapters (per replica, by name: what it serves, and each wanted adapter it lacks with the engine's
    reason) and the AdaptersReady condition: False while a ready replica lacks one of `wanted` (AdapterLoadFailed
    where an engine said why, else AdapterNotLoaded), True when every ready replica serves them all."""
    rows, lacking = [], {name: [] for name in wanted}
    for replica in sorted(replicas):
        r = replicas[replica]
        why = dict(r.failed)
        missing = [{"name": n, "reason": why.get(n, UNLISTED)} for n in wanted if n not in r.loaded]
        for m in missing:
            lacking[m["name"]].append((replica, m["reason"]))
        rows.append({"replica": replica, "loaded": list(r.loaded), **({"missing": missing} if missing else {})})
    if not replicas:
        return AdapterReport(rows, None)
    bad = [(name, where) for name, where in lacking.items() if where]
    if not bad:
        return AdapterReport(rows, ("True", "AdaptersLoaded",
                                    f"{len(wanted)} adapter(s) loaded on every ready replica ({len(replicas)})"))
    clauses = [f"adapter {name!r} is not loaded on {len(where)} of {len(replicas)} ready replica(s) "
               f"({_names([r for r, _ in where])}): {next((w for _, w in where if w != UNLISTED), UNLISTED)}"
               for name, where in bad[:NAMED]]
    more = f"; and {len(bad) - NAMED} more adapter(s) (status.adapters lists each replica's)" if len(bad) > NAMED \
        else ""
    known = any(w != UNLISTED for _, where in bad for _, w in where)
    return AdapterReport(rows, ("False", "AdapterLoadFailed" if known else "AdapterNotLoaded",
                                "; ".join(clauses) + more))
