"""Tenants: who a client is (its API key names a tenant) and whether a tenant's request is admitted now, as pure
functions of (the tenant's limits, its counters, the clock, the request's estimated tokens). Nothing here reads a
clock: `now` is passed in (seconds, any monotonic origin), and every state is a frozen dataclass returned anew.

Rule, in order, over one tenant's own counters (gateway.tenants in the spec):
- concurrency: with max_concurrent_requests of its requests in flight, a request is refused with Retry-After 1 s
  (a slot frees when one of its answers ends, which the gateway cannot foresee);
- rates: requests and estimated tokens per minute, two buckets refilling evenly over the minute and holding at
  most a minute's worth (the overflow budget's buckets, overflow_budget.py). A request is admitted when both hold
  its cost; else it is refused with Retry-After = the seconds until both will, and nothing is charged;
- an admitted request is charged one request and its tokens at once, and holds a concurrency slot until
  `released`;
- overflow: its requests may send max_overflow_tokens_per_minute estimated tokens to the overflow API (a third
  bucket); one that would exceed it stays local.
Answers carry OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} headers for the rates set (reset: the
time until the bucket is full again), refusals also Retry-After and retry-after-ms (what OpenAI's clients wait).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from floodway.operator.gateway.overflow_budget import (
    BudgetLimits,
    BudgetState,
    budget_refill,
    budget_take,
    budget_wait_s,
)
from floodway.operator.spec.models import TENANT_NAME, TenantLimitsSpec, TenantSpec

# The tenant of a client the tenants file does not name (no tenants file, or a key only the client keys file lists).
ANONYMOUS = "anonymous"
CONCURRENT = "concurrent_requests"
REQUESTS = "requests_per_minute"
TOKENS = "tokens_per_minute"
Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TenantState:
    rate: BudgetState = BudgetState()  # requests and tokens per minute
    overflow: BudgetState = BudgetState()  # overflow tokens per minute
    in_flight: int = 0


@dataclass(frozen=True)
class Admission:
    state: TenantState  # the tenant's counters after the decision
    headers: Headers  # the x-ratelimit-* headers (and, refused, Retry-After)
    refused: str | None = None  # the limit that refused it: CONCURRENT, REQUESTS or TOKENS; None: admitted
    retry_after_s: float | None = None  # refused: the seconds until a retry may succeed


def merged_limits(default: TenantLimitsSpec, own: TenantSpec) -> TenantLimitsSpec:
    """A listed tenant's limits: the fields it sets, the default's for the others."""
    return TenantLimitsSpec(**{**default.model_dump(), **own.model_dump(exclude_none=True, exclude={"name"})})


def _rate(limits: TenantLimitsSpec) -> BudgetLimits:
    return BudgetLimits(limits.max_requests_per_minute, limits.max_tokens_per_minute)


def _overflow(limits: TenantLimitsSpec) -> BudgetLimits:
    return BudgetLimits(max_tokens_per_minute=limits.max_overflow_tokens_per_minute)


def _ceil(x: float) -> int:
    return math.ceil(round(x, 6))  # the buckets' float noise (19.499999...) must not add a unit


def reset_text(seconds: float) -> str:
    """A duration as OpenAI writes its reset headers (Go's duration format): 0s, 120ms, 1.5s, 6m0s. The buckets
    refill within a minute, so there are no hours."""
    ms = _ceil(seconds * 1000)
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    minutes, ms = divmod(ms, 60_000)
    text = f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes}m{text}" if minutes else text


def rate_headers(rate: BudgetState, limits: TenantLimitsSpec) -> Headers:
    """x-ratelimit-* for each rate limit set; `rate` refilled to now (its levels known)."""
    out = []
    for unit, limit, level in (("requests", limits.max_requests_per_minute, rate.requests),
                               ("tokens", limits.max_tokens_per_minute, rate.tokens)):
        if limit is not None:
            out += [(f"x-ratelimit-limit-{unit}", str(limit)),
                    (f"x-ratelimit-remaining-{unit}", str(max(0, math.floor(level)))),
                    (f"x-ratelimit-reset-{unit}", reset_text((limit - level) * 60.0 / limit))]
    return tuple(out)


def _retry_headers(wait_s: float) -> Headers:
    return ("retry-after", str(max(1, _ceil(wait_s)))), ("retry-after-ms", str(max(1, _ceil(wait_s * 1000))))


def admit(state: TenantState, limits: TenantLimitsSpec, tokens: int, now: float) -> Admission:
    """Whether one request of `tokens` estimated tokens is admitted now, and the tenant's counters after it."""
    rate = budget_refill(state.rate, _rate(limits), now)
    state = replace(state, rate=rate)
    if limits.max_concurrent_requests is not None and state.in_flight >= limits.max_concurrent_requests:
        return Admission(state, rate_headers(rate, limits) + _retry_headers(1.0), CONCURRENT, 1.0)
    waits = {REQUESTS: budget_wait_s(rate, BudgetLimits(max_requests_per_minute=limits.max_requests_per_minute),
                                     tokens, now),
             TOKENS: budget_wait_s(rate, BudgetLimits(max_tokens_per_minute=limits.max_tokens_per_minute), tokens, now)}
    refused = max(waits, key=waits.get)
    if waits[refused] > 0.0:
        return Admission(state, rate_headers(rate, limits) + _retry_headers(waits[refused]), refused, waits[refused])
    rate = budget_take(rate, _rate(limits), tokens, now)
    return Admission(TenantState(rate, state.overflow, state.in_flight + 1), rate_headers(rate, limits))


def released(state: TenantState) -> TenantState:
    """The counters once an admitted request is over (answered, failed, or its client gone)."""
    return replace(state, in_flight=max(0, state.in_flight - 1))


def overflow_allows(state: TenantState, limits: TenantLimitsSpec, tokens: int, now: float) -> bool:
    """Whether the tenant's overflow cap lets one more request of `tokens` go to the overflow API now."""
    cap = limits.max_overflow_tokens_per_minute
    return cap is None or cap > 0 and budget_wait_s(state.overflow, _overflow(limits), tokens, now) == 0.0


def overflow_taken(state: TenantState, limits: TenantLimitsSpec, tokens: int, now: float) -> TenantState:
    """The counters once one request of `tokens` went to the overflow API."""
    return replace(state, overflow=budget_take(state.overflow, _overflow(limits), tokens, now))


def parse_tenants(text: str) -> dict[str, str]:
    """API key -> tenant from the tenants file: one `<key> <tenant>` per line; blank lines and lines starting with
    `#` are skipped. Raises ValueError naming the line (never the key)."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2 or not re.fullmatch(TENANT_NAME, fields[1]):
            raise ValueError(f"line {number}: expected `<api key> <tenant>`, the tenant matching {TENANT_NAME}")
        if out.setdefault(fields[0], fields[1]) != fields[1]:
            raise ValueError(f"line {number}: its key already names tenant {out[fields[0]]}")
    return out


def tenant_of(key: str, tenant_keys: Mapping[str, str], tokens: Collection[str]) -> str | None:
    """The tenant a client's key names: its tenants-file entry, else ANONYMOUS for a key of the client keys file;
    None for a key in neither (401). Each key is compared in constant time."""
    found = None
    for known, tenant in tenant_keys.items():
        if secrets.compare_digest(key.encode(), known.encode()):
            found = tenant
    if found is None and any(secrets.compare_digest(key.encode(), t.encode()) for t in tokens):
        found = ANONYMOUS
    return found
