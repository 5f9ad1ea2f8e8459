"""SLO attainment as the gateway counts it, by tenant and class: a streamed answer's TTFT when its first chunk is
read, its TPOT (tpot.py) when it ended whole, each against its class's SLO, else the service's. A whole answer's
first byte is its last token: neither is measured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.overflow import RequestInfo
from floodway.operator.gateway.tpot import timed
from starlette.responses import Response, StreamingResponse


@dataclass(frozen=True)
class Slos:
    ttft_s: float | None = None
    tpot_s: float | None = None

    @classmethod
    def of(cls, slo) -> Slos:
        """From the gateway config's slo (milliseconds)."""
        return cls(*(ms / 1000.0 if ms else None for ms in (slo.ttft_ms, slo.tpot_ms)))


def attained(answer: Response, stream: bool, info: RequestInfo, tenant: str | None, klass: str | None,
             m: GatewayMetrics, clock: Callable[[], float], service: Slos) -> Response:
    """Counts the answer's TTFT now (the time since the request arrived, holds included) and wraps its stream to
    count its TPOT at the end; returns the answer to send."""
    if not stream or answer.status_code >= 400:
        return answer
    ttft = info.ttft_slo_s or service.ttft_s
    if ttft is not None:
        _count(clock() - info.arrived_at <= ttft, (m.tenant_ttft_measured, m.tenant_ttft_met, tenant),
               (m.class_ttft_measured, m.class_ttft_met, klass))
    tpot = info.tpot_slo_s or service.tpot_s
    if tpot is not None and isinstance(answer, StreamingResponse):
        answer.body_iterator = timed(answer.body_iterator, clock, lambda gap: _count(
            gap <= tpot, (m.tenant_tpot_measured, m.tenant_tpot_met, tenant),
            (m.class_tpot_measured, m.class_tpot_met, klass)))
    return answer


def _count(met: bool, *by) -> None:
    """One answer measured, and met or not, on each (measured counter, met counter, label) with a label."""
    for measured, within, label in by:
        if label is not None:
            measured.labels(label).inc()
            if met:
                within.labels(label).inc()
