"""The gateway's configuration: one YAML file (the operator renders the same shape into a ConfigMap, and
`floodway up` writes it to a file). Unknown keys are errors, so a typo never silently means a default.

Example:

    port: 8000
    served_models: [chat, support-bot]     # the base model first, then its LoRA adapters
    max_loras: 1                           # adapters each engine holds resident at once (their --max-loras)
    backends:
      static: [http://127.0.0.1:8001, http://127.0.0.1:8002]      # or:
      # kubernetes: {namespace: default, service: chat-engine, port: http}
    scrape_interval_s: 0.5
    routing: {prefix_aware: true, prefix_load_cap: 1.3}   # prefer the engine holding the prompt's prefix
    slo: {ttft_ms: 500, tpot_ms: 50}
    overflow:
      enabled: true
      base_url: https://api.example.com/v1
      model: small-model
      api_key_env: OVERFLOW_API_KEY        # or api_key_file: /var/run/secrets/overflow/api-key
      max_waiting_per_replica: 4
      max_requests_per_minute: 600
      models: {chat: small-model, support-bot: small-model-ft}   # an adapter without an entry never overflows
    opt_out_header: x-floodway-no-overflow
    auth: {tokens_file: /var/run/secrets/gateway/tokens}
    tenants:                               # per-tenant limits (docs/guides/tenants.md)
      keys_file: /var/run/secrets/gateway/tenants   # `<api key> <tenant>` per line
      default: {max_requests_per_minute: 60, max_concurrent_requests: 4}
      limits: [{name: batch, max_tokens_per_minute: 200000, max_overflow_tokens_per_minute: 0, default_class: batch}]
    classes: [{name: batch, priority: 10, overflow: false}]   # SLO classes (classes.py)
    engine_scheduling_policy: priority     # the engines take each class's priority
    max_body_bytes: 4194304
    debug_state: false
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

import yaml
from floodway.engine.config import EngineConfig
from floodway.operator.gateway.breaker import BreakerPolicy
from floodway.operator.gateway.overflow import SLOWEST_TOKENS_PER_S, OverflowPolicy
from floodway.operator.gateway.overflow_budget import BudgetLimits
from floodway.operator.gateway.routing import PrefixPolicy, RoutingWeights
from floodway.operator.gateway.tenants import merged_limits
from floodway.operator.runtimes import DEFAULT, RUNTIMES
from floodway.operator.spec.models import EngineSpec, RoutingSpec, SLOClassSpec, TenantLimitsSpec, TenantsSpec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def same_named(settings: BaseModel, target) -> dict:
    """The settings whose names are fields of the dataclass `target`: the config passes them on as they are."""
    names = type(settings).model_fields
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(target) if f.name in names}


class KubernetesSource(_Strict):
    """Backends are the ready endpoints of the engine Service, read from its EndpointSlices."""

    namespace: str = Field(min_length=1)
    service: str = Field(min_length=1)
    port: int | str | None = Field(None, description="Port number or name in the slices; default: the first.")
    refresh_s: float = Field(2.0, gt=0, description="Backoff before listing again after an API error (doubles "
                             "per failure up to 16x); changes themselves arrive at once by watch.")


class Backends(_Strict):
    static: list[str] = Field(default_factory=list, description="Engine base URLs, e.g. http://10.0.0.5:8000")
    kubernetes: KubernetesSource | None = None

    @field_validator("static")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"backend URL must start with http:// or https://, got {url!r}")
        if len(set(urls)) != len(urls):
            raise ValueError("backend URLs must be distinct")
        return [u.rstrip("/") for u in urls]

    @model_validator(mode="after")
    def _one_source(self) -> Backends:
        if self.static and self.kubernetes:
            raise ValueError("give either backends.static or backends.kubernetes, not both")
        return self


class Routing(RoutingSpec):
    """The spec's gateway.routing settings (inherited: same names, same defaults), and the gateway's own."""

    model_config = ConfigDict(frozen=True)

    seed: int | None = Field(None, description="Seed of the power-of-two-choices sampler (None: random).")
    waiting_weight: float = Field(RoutingWeights.waiting_weight, ge=0,
                                  description="Extra score per queued request on a backend.")
    kv_weight: float = Field(RoutingWeights.kv_weight, ge=0, description="Score added at 100% KV cache usage.")
    recent_half_life_s: float = Field(RoutingWeights.recent_half_life_s, gt=0, description="Half-life of the "
                                      "work sent to each backend lately (requests and their uncached prompt "
                                      "tokens), which the prefix load cap reads and which breaks ties between "
                                      "equally loaded backends (the one that got less work wins).")

    def weights(self) -> RoutingWeights:
        return RoutingWeights(**same_named(self, RoutingWeights))

    def prefix_policy(self) -> PrefixPolicy | None:
        return PrefixPolicy(**same_named(self, PrefixPolicy)) if self.prefix_aware else None


class Slo(_Strict):
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)


class Breaker(_Strict):
    failure_threshold: int = Field(BreakerPolicy.failure_threshold, ge=1)
    cooldown_s: float = Field(BreakerPolicy.cooldown_s, gt=0)


class Overflow(_Strict):
    enabled: bool = OverflowPolicy.enabled
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, including /v1.")
    model: str | None = Field(None, description="Model name sent to the overflow API (default: the client's).")
    models: dict[str, str] = Field(default_factory=dict, description="Local model or adapter name -> the overflow "
                                   "API's model for it (the base model's entry wins over `model`). A request for an "
                                   "adapter without an entry never overflows: it is served locally, held while no "
                                   "engine is ready, or refused with 429 and Retry-After when the hold is full.")
    api_key_env: str | None = None
    api_key_file: str | None = None
    max_waiting_per_replica: float = Field(OverflowPolicy.max_waiting_per_replica, gt=0)
    predicted_ttft_factor: float = Field(OverflowPolicy.predicted_ttft_factor, gt=0)
    max_requests_per_minute: float | None = Field(None, ge=0)
    max_tokens_per_minute: float | None = Field(None, ge=0)
    max_share: float | None = Field(None, ge=0, lt=1, description="Most share of the requests, and of their "
                                    "estimated tokens, sent to the overflow API over the last half hour (decayed); "
                                    "past it, requests stay local. The operator sets the spec's "
                                    "autoscaling.overflowShare here where autoscaling.priority is budget. Unset: no "
                                    "share limit.")
    hold_queue_size: int = Field(OverflowPolicy.hold_queue_size, ge=0)
    hold_timeout_s: float = Field(OverflowPolicy.hold_timeout_s, ge=0)
    connect_timeout_s: float = Field(2.0, gt=0)
    first_byte_timeout_s: float = Field(30.0, gt=0, description="A slower first byte counts as a failure; for a "
                                        "request without stream (whose first byte comes after its last token), "
                                        "plus the tokens it allows at slowest_tokens_per_s, up to request_timeout_s.")
    slowest_tokens_per_s: float = Field(SLOWEST_TOKENS_PER_S, gt=0, description="The pace below which a whole "
                                        "answer counts as a stalled API rather than a long answer.")
    breaker: Breaker = Field(default_factory=Breaker)

    @model_validator(mode="after")
    def _complete(self) -> Overflow:
        if self.enabled and not self.base_url:
            raise ValueError("overflow.enabled needs overflow.base_url")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"overflow.base_url must start with http:// or https://, got {self.base_url!r}")
        if self.api_key_env and self.api_key_file:
            raise ValueError("give either overflow.api_key_env or overflow.api_key_file, not both")
        return self


class Auth(_Strict):
    tokens_file: str | None = Field(None, description="Accepted client bearer tokens, one per line.")


class Tenants(TenantsSpec):
    """The spec's gateway.tenants settings (inherited: same names, same defaults), and the tenants file."""

    model_config = ConfigDict(frozen=True)

    keys_file: str | None = Field(None, description="API key -> tenant, one `<key> <tenant>` per line (tenants.py); "
                                  "its keys are accepted client tokens besides auth.tokens_file's.")

    def enabled(self) -> bool:
        """Whether tenants are told apart or held to any limit (else the gateway skips them altogether)."""
        return bool(self.keys_file or self.limits or self.default.model_dump(exclude_none=True))

    def limits_by_name(self) -> dict[str, TenantLimitsSpec]:
        return {t.name: merged_limits(self.default, t) for t in self.limits}


_POLICY = EngineSpec.model_fields["scheduling_policy"]


class GatewayConfig(_Strict):
    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    served_models: list[str] = Field(default_factory=list, description="Names /v1/models lists (default: "
                                     "the backends'); requests naming another model get 404, naming none the "
                                     "served one, as engines do. The first is the base model, the others its LoRA "
                                     "adapters (without the list: the names the engines list as adapters).")
    max_loras: int = Field(EngineConfig.max_loras, ge=1, description="LoRA adapters each engine holds resident at "
                           "once (the engines' --max-loras): how many the gateway remembers sending to each, for "
                           "routing an adapter's requests to an engine that holds it.")
    backends: Backends = Field(default_factory=Backends)
    engine_runtime: Literal[tuple(RUNTIMES)] = Field(DEFAULT, description="What the engines run "
                                                     "(operator/runtimes.py): their readiness path and metric names.")
    routing: Routing = Field(default_factory=Routing)
    scrape_interval_s: float = Field(0.5, gt=0, description="How often each engine's /ready and /metrics are read.")
    connect_timeout_s: float = Field(2.0, gt=0)
    request_timeout_s: float = Field(600.0, gt=0, description="Longest a local backend may send nothing (a "
                                     "whole answer's first byte comes after its last token): then the client gets "
                                     "504 and the backend stays in rotation. Also the overflow API's deadline for a "
                                     "whole answer.")
    slo: Slo = Field(default_factory=Slo)
    overflow: Overflow = Field(default_factory=Overflow)
    opt_out_header: str = "x-floodway-no-overflow"
    class_header: str = Field("x-floodway-class", description="The request header that picks a lower class "
                              "(classes.py) than the client's tenant's default_class.")
    classes: list[SLOClassSpec] = Field(default_factory=list, description="The spec's classes (same names).")
    engine_scheduling_policy: _POLICY.annotation = Field(_POLICY.default, description="The engines' "
                                                         "--scheduling-policy: with priority, each classed request is "
                                                         "sent with its class's priority.")
    auth: Auth = Field(default_factory=Auth)
    tenants: Tenants = Field(default_factory=Tenants)
    max_body_bytes: int = Field(4 * 2**20, ge=1024, description="Largest request body accepted (413 beyond); "
                                "nothing larger is read, sent to an engine or to the overflow API.")
    debug_state: bool = Field(False, description="Serve /debug/state (backends, breaker, budget); behind the "
                              "client tokens when auth is on.")

    @model_validator(mode="after")
    def _somewhere_to_send(self) -> GatewayConfig:
        if not self.backends.static and not self.backends.kubernetes and not self.overflow.enabled:
            raise ValueError("no backends: give backends.static, backends.kubernetes or enable overflow")
        return self

    @model_validator(mode="after")
    def _classes_known(self) -> GatewayConfig:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError("classes[].name must be unique")
        named = {t.default_class for t in (self.tenants.default, *self.tenants.limits)} - {None}
        if named - set(names):
            raise ValueError(f"tenants' default_class {sorted(named - set(names))} not among classes {names}")
        return self

    def overflow_policy(self) -> OverflowPolicy:
        o = self.overflow
        return OverflowPolicy(**{
            **same_named(o, OverflowPolicy), "budget": BudgetLimits(**same_named(o, BudgetLimits)),
            "breaker": BreakerPolicy(**same_named(o.breaker, BreakerPolicy)),
            "ttft_slo_s": None if self.slo.ttft_ms is None else self.slo.ttft_ms / 1000.0})


def load_config(path: str | os.PathLike) -> GatewayConfig:
    """Reads and validates a YAML file; raises ValueError naming the file and the bad field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read gateway config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"gateway config {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"gateway config {path} must be a YAML mapping, got {type(data).__name__}")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as e:
        raise ValueError(f"invalid gateway config {path}:\n{e}") from None
