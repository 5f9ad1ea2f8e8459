"""SLO classes (spec.classes): which class a request is of, as a pure function of the classes, its tenant's default
class and the class its header asks for.

Rule: a request is of its tenant's defaultClass (none: no class, the service's own SLO and overflow rule); the
x-floodway-class header may pick a lower class, one whose priority number is at least its own (a tenant without a
class: at least 0), never a higher one, so a client cannot buy its way up the engines' queues. A class the spec does
not declare is a 400, a higher one a 403. The class's priority goes to the engines as the request's `priority` (with
engine.schedulingPolicy priority), its overflow flag and TTFT SLO to the overflow rule (overflow.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from floodway.operator.gateway.overflow import RequestInfo
from floodway.operator.spec.models import SLOClassSpec


@dataclass(frozen=True)
class ClassChoice:
    chosen: SLOClassSpec | None = None  # None: no class
    status: int = 200  # 400 or 403: refused, with `error`
    error: str | None = None


def request_class(classes: Mapping[str, SLOClassSpec], tenant_class: str | None, asked: str) -> ClassChoice:
    """The class of a request whose tenant is of `tenant_class` and whose header asks for `asked` ("": none)."""
    own = classes.get(tenant_class) if tenant_class else None
    if not asked:
        return ClassChoice(own)
    chosen = classes.get(asked)
    if chosen is None:
        return ClassChoice(None, 400, f"unknown class {asked!r}; the classes are {sorted(classes)}")
    floor = own.priority if own is not None else 0
    if chosen.priority < floor:
        return ClassChoice(None, 403, f"class {asked!r} is above this client's class ({tenant_class or 'none'}); a "
                           "request may only pick a lower one")
    return ClassChoice(chosen)


def classed(info: RequestInfo, c: SLOClassSpec) -> RequestInfo:
    """A request's overflow-rule fields once it is of class `c`: whether it may overflow, its TTFT and TPOT SLOs
    (seconds; None: the service's) and its queue limit."""
    return replace(info, class_local=not c.overflow, ttft_slo_s=c.ttft_ms / 1000.0 if c.ttft_ms else None,
                   tpot_slo_s=c.tpot_ms / 1000.0 if c.tpot_ms else None, queue_limit=c.queue_limit)
