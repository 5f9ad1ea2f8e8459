"""Fair share between tenants in the gateway's hold queue: which held request is looked at next, as pure functions
of the held requests and the tenants' virtual token counters (VTC, Sheng et al., "Fairness in Serving Large Language
Models", OSDI 2024). Nothing here reads a clock or mutates its inputs.

Rule: each tenant has, per class (spec.classes; no class is a class of its own), a counter of the estimated tokens
the queue released of its requests. The queue is looked at in rounds (proxy.py), each held request once per round,
in this order: lower class priority number first; within a class, the tenant with the smallest counter (ties: the
one whose oldest held request came first), its oldest held request first. A request released is charged to its
tenant's counter at once, so the next pick already sees it: a tenant with many held requests cannot pass one with
few. A tenant that had none of its class held joins at the smallest counter among the class's held tenants (or
keeps its own when that is larger), so an idle tenant cannot bank credit; the counters of a class are dropped once
none of it is held, so every backlog starts even (and the state is bounded by what is held).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

Counters = Mapping[tuple[str | None, str], float]  # (class, tenant) -> estimated tokens released


@dataclass(frozen=True)
class Held:
    seq: int  # the order requests joined the queue
    tenant: str
    klass: str | None  # its class (fairness is between tenants of one class); None: no class
    priority: int = 0  # its class's priority (lower first); no class: 0
    tokens: int = 0  # what it is charged when released


def joined(counters: Counters, held: Iterable[Held], entry: Held) -> dict:
    """The counters once `entry` joins the queue (`held`: the requests held before it)."""
    out = dict(counters)
    same = [h for h in held if h.klass == entry.klass]
    if any(h.tenant == entry.tenant for h in same):
        return out  # still backlogged: its counter stands
    others = [counters.get((entry.klass, h.tenant), 0.0) for h in same]
    own = counters.get((entry.klass, entry.tenant), 0.0)
    out[entry.klass, entry.tenant] = max(own, min(others)) if others else own
    return out


def left(counters: Counters, held: Iterable[Held], entry: Held, released: bool) -> dict:
    """The counters once `entry` left the queue (`held`: those still held): charged its tokens if it was released
    (sent on), and its class's counters dropped when none of the class is held any more."""
    out = dict(counters)
    if not any(h.klass == entry.klass for h in held):
        return {k: v for k, v in out.items() if k[0] != entry.klass}
    if released:
        out[entry.klass, entry.tenant] = out.get((entry.klass, entry.tenant), 0.0) + entry.tokens
    return out


def next_turn(held: Iterable[Held], counters: Counters, done: Collection[int]) -> int | None:
    """The seq of the held request to look at next in this round (`done`: the seqs already looked at); None: the
    round is over."""
    todo = [h for h in held if h.seq not in done]
    if not todo:
        return None
    return min(todo, key=lambda h: (h.priority, counters.get((h.klass, h.tenant), 0.0), h.seq)).seq
