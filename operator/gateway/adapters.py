"""LoRA adapters at the gateway (pure): which model name the overflow API gets for a request's `model`, and which
engines likely hold a request's adapter, for affinity scored as the prefix cache's (routing.pick_prefix, with its
load cap).

An engine holds an adapter it serves from startup or was last asked for (its resident slots, --max-loras of them,
swap least recently used); the gateway learns the second from what it routes there, as it learns prefixes, and
reads the first from each engine's `/v1/models` (adapters list their base model as `parent`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping


def overflow_model(requested: str | None, served: str, mapping: Mapping[str, str], default: str | None) -> str | None:
    """The external API's model for a request naming `requested` (None: the served model), or None when the request
    must never go there: an adapter (or any other name) without an entry in overflow.models, since the API has never
    heard of it. The served model without an entry keeps overflow.model, else its own name."""
    name = requested or served
    if name in mapping:
        return mapping[name]
    return (default or served) if name == served else None


def adapter_hits(requested: str | None, served: str, holders: Mapping[str, Collection[str]]) -> dict[str, float]:
    """Per backend, 1.0 where it holds the adapter the request names; none for the served model (every engine has
    it), so such a request is routed on load and prefixes alone."""
    if requested is None or requested == served:
        return {}
    return {backend: 1.0 for backend, names in holders.items() if requested in names}


class AdapterIndex:
    """Per backend, the adapters it serves from startup and those the gateway last sent it (at most `slots`, the
    least recently sent forgotten first, as the engine swaps its slots)."""

    def __init__(self, slots: int = 1):
        self.slots = slots
        self._sent: dict[str, OrderedDict[str, None]] = {}
        self._listed: dict[str, frozenset[str]] = {}

    def listed(self, backend: str, adapters: Collection[str]) -> None:
        """The adapters the backend's /v1/models lists (loaded at startup or through its load endpoint)."""
        self._listed[backend] = frozenset(adapters)

    def sent(self, backend: str, adapter: str) -> None:
        lru = self._sent.setdefault(backend, OrderedDict())
        lru[adapter] = None
        lru.move_to_end(adapter)
        while len(lru) > self.slots:
            lru.popitem(last=False)

    def forget(self, backend: str) -> None:
        """A backend that left or turned unready has lost its slots."""
        self._sent.pop(backend, None)
        self._listed.pop(backend, None)

    def holders(self) -> dict[str, frozenset[str]]:
        """Per backend, the adapters it likely has resident: those sent lately, else those it lists."""
        out = {b: frozenset(lru) for b, lru in self._sent.items()}
        for b, names in self._listed.items():
            out[b] = out.get(b, frozenset()) | (names if len(names) <= self.slots else frozenset())
        return out
