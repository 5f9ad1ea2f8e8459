"""LoRA adapters at the gateway (pure): which adapter a request names, which model name the overflow API gets for
it, and which engines likely hold it, for affinity scored as the prefix cache's (routing.pick_prefix, with its
load cap).

An engine holds an adapter it serves from startup or was last asked for (its resident slots, --max-loras of them,
swap least recently used); the gateway learns the second from what it routes there, as it learns prefixes, and
reads the first from each engine's `/v1/models` when it turns ready (adapters list their base model as `parent`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping


def adapter_of(requested: str | None, served: str | None, listed: Collection[str]) -> str | None:
    """The adapter a request's `model` names, or None for the base model. With the base model known (`served`: the
    gateway's served_models[0]) every other name is an adapter; without it, only a name some engine lists as one
    (an unknown name is the engines' to refuse)."""
    if requested is None or requested == served:
        return None
    return requested if served is not None or requested in listed else None


def never_overflows(adapter: str | None, mapping: Mapping[str, str]) -> bool:
    """Whether a request must never go to the overflow API: it names an adapter without an overflow.models entry
    (the API has never heard of it). The gateway and the simulator both ask this."""
    return adapter is not None and adapter not in mapping


def overflow_model(name: str | None, adapter: str | None, mapping: Mapping[str, str],
                   default: str | None) -> str | None:
    """The external API's model for a request for local model `name` (None: none named and the base unknown; the
    client's body is then sent as it is): an adapter's entry; for the base model its entry, else overflow.model,
    else its own name."""
    if adapter is not None:
        return mapping.get(adapter)
    return mapping.get(name, default or name) if name is not None else default


def adapter_hits(adapter: str | None, holders: Mapping[str, Collection[str]]) -> dict[str, float]:
    """Per backend, 1.0 where it holds the request's adapter; none for the base model (every engine has it), so
    such a request is routed on load and prefixes alone."""
    if adapter is None:
        return {}
    return {backend: 1.0 for backend, names in holders.items() if adapter in names}


class AdapterIndex:
    """Per backend, the adapters it serves from startup and those the gateway last sent it (at most `slots`, the
    least recently sent forgotten first, as the engine swaps its slots)."""

    def __init__(self, slots: int):
        self.slots = slots
        self._sent: dict[str, OrderedDict[str, None]] = {}
        self._listed: dict[str, frozenset[str]] = {}
        self._names: frozenset[str] = frozenset()  # every adapter some backend lists (read per request)

    def listed(self, backend: str, adapters: Collection[str]) -> None:
        """The adapters the backend's /v1/models lists (loaded at startup or through its load endpoint)."""
        self._listed[backend] = frozenset(adapters)
        self._names = frozenset().union(*self._listed.values())

    def sent(self, backend: str, adapter: str) -> None:
        lru = self._sent.setdefault(backend, OrderedDict())
        lru[adapter] = None
        lru.move_to_end(adapter)
        while len(lru) > self.slots:
            lru.popitem(last=False)

    def forget(self, backend: str) -> None:
        """A backend that left or turned unready has lost its slots."""
        self._sent.pop(backend, None)
        if self._listed.pop(backend, None):
            self._names = frozenset().union(*self._listed.values())

    def retain(self, backends: Iterable[str]) -> None:
        """Forgets every backend not in `backends`."""
        keep = set(backends)
        for backend in [b for b in {*self._sent, *self._listed} if b not in keep]:
            self.forget(backend)

    def names(self) -> frozenset[str]:
        """Every adapter some backend lists."""
        return self._names

    def holders(self) -> dict[str, frozenset[str]]:
        """Per backend, the adapters it likely has resident: those sent lately, and those it lists when they fit
        its slots (more than fit: which are resident is unknown)."""
        out = {b: frozenset(lru) for b, lru in self._sent.items()}
        for b, names in self._listed.items():
            out[b] = out.get(b, frozenset()) | (names if len(names) <= self.slots else frozenset())
        return out
