"""One gateway's tenant counters and their metrics: a thin shell around the rules of tenants.py, and the answer
wrapper that sends the x-ratelimit-* headers and frees the tenant's concurrency slot (and its class's in-flight
count) once the answer is over."""

from __future__ import annotations

from collections.abc import Callable

from floodway.operator.gateway.config import Tenants
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.payload import error_body
from floodway.operator.gateway.tenants import (
    CONCURRENT,
    Admission,
    Headers,
    TenantState,
    admit,
    overflow_allows,
    overflow_taken,
    released,
)
from floodway.operator.spec.models import TenantLimitsSpec
from starlette.responses import JSONResponse

_WHAT = {CONCURRENT: "concurrent requests", "requests_per_minute": "requests per minute",
         "tokens_per_minute": "tokens per minute"}


class TenantGate:
    def __init__(self, config: Tenants, metrics: GatewayMetrics, clock: Callable[[], float]):
        self.default, self.limits = config.default, config.limits_by_name()
        self.metrics, self.clock = metrics, clock
        self.states: dict[str, TenantState] = {}  # one per tenant seen: the tenants file bounds them

    def limits_of(self, tenant: str) -> TenantLimitsSpec:
        return self.limits.get(tenant, self.default)

    def admit(self, tenant: str, tokens: int) -> Admission:
        a = admit(self.states.get(tenant, TenantState()), self.limits_of(tenant), tokens, self.clock())
        self.states[tenant] = a.state
        if a.refused is not None:
            self.metrics.tenant_rejected.labels(tenant, a.refused).inc()
        else:
            self.metrics.tenant_requests.labels(tenant).inc()
            self.metrics.tenant_tokens.labels(tenant).inc(tokens)
            self.metrics.tenant_in_flight.labels(tenant).set(a.state.in_flight)
        return a

    def release(self, tenant: str) -> None:
        self.states[tenant] = state = released(self.states[tenant])
        self.metrics.tenant_in_flight.labels(tenant).set(state.in_flight)

    def may_overflow(self, tenant: str, tokens: int) -> bool:
        allowed = overflow_allows(self.states[tenant], self.limits_of(tenant), tokens, self.clock())
        if not allowed:
            self.metrics.tenant_overflow_capped.labels(tenant).inc()
        return allowed

    def overflowed(self, tenant: str, tokens: int) -> None:
        self.states[tenant] = overflow_taken(self.states[tenant], self.limits_of(tenant), tokens, self.clock())
        self.metrics.tenant_overflow.labels(tenant).inc()


def refusal(tenant: str, a: Admission) -> JSONResponse:
    """The 429 of a request over a tenant limit, in OpenAI's shape, with Retry-After and the x-ratelimit-* headers."""
    message = (f"tenant {tenant} is over its limit of {_WHAT[a.refused]}; retry in {a.retry_after_s:.3g} s")
    return JSONResponse(error_body(message, "rate_limit_exceeded", "rate_limit_exceeded"), 429, headers=dict(a.headers))


class WithRelease:
    """An answer (an ASGI application for one request) sent with `headers` added, calling `release` once when it
    is over: sent whole, its stream ended or failed, or its client gone."""

    __slots__ = ("answer", "headers", "release")

    def __init__(self, answer, headers: Headers, release: Callable[[], None]):
        self.answer, self.release = answer, release
        self.headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]

    async def __call__(self, scope, receive, send) -> None:
        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *self.headers]}
            await send(message)

        try:
            await self.answer(scope, receive, send_with_headers)
        finally:
            self.release()
