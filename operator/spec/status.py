"""The InferenceService status the operator writes (and `floodway up` prints)."""

from typing import Literal

from floodway.operator.spec.base import SpecModel
from pydantic import Field


class Condition(SpecModel):
    """A standard Kubernetes condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    observed_generation: int | None = None


class ObservedSignals(SpecModel):
    """Signals the autoscaler saw at its last decision."""

    waiting: float | None = None
    """Requests queued across ready replicas."""
    running: float | None = None
    """Requests being decoded across ready replicas."""
    kv_cache_usage: float | None = None
    """Mean KV-cache usage of ready replicas (0 to 1)."""
    slo_attainment: float | None = None
    """Share of finished requests meeting the SLO over the window."""
    goodput: float | None = None
    """Requests per second that met the SLO."""
    arrival_rate: float | None = None
    """Requests per second arriving at the gateway."""
    overflow_rate: float | None = None
    """Share of requests sent to the overflow API."""


class MissingAdapter(SpecModel):
    """An adapter of spec.adapters that a replica does not serve."""

    name: str
    reason: str = ""
    """Why, as the engine said it (e.g. no adapter_config.json, a rank above --max-lora-rank, a different base
    model), or that it is not listed in /v1/models."""


class ReplicaAdapters(SpecModel):
    """The LoRA adapters one ready engine replica serves, as its /v1/models lists them."""

    replica: str
    """The engine pod."""
    loaded: list[str] = Field(default_factory=list)
    """Adapters it serves: those of spec.adapters that loaded, and any loaded since through its load endpoint."""
    missing: list[MissingAdapter] = Field(default_factory=list)
    """Adapters of spec.adapters it does not serve; the base model and the other adapters serve on."""


class TrafficHistory(SpecModel):
    """The traffic history the forecast reads (with autoscaling.forecastLeadSeconds): requests and prompt tokens per
    minute, kept for two weeks in the ConfigMap <name>-history."""

    since: str = Field(json_schema_extra={"format": "date-time"})
    """The start of the oldest minute kept."""
    minutes: int
    """Minutes observed; those the operator was down for are missing, and the forecast treats them as unknown."""
    expected_requests_per_second: float | None = None
    """What the history expects within the next forecastLeadSeconds (the same time on two earlier days); absent:
    no expectation (less than two days kept, a minute of those days missing, or no traffic then)."""


class InferenceServiceStatus(SpecModel):
    """Observed state of the service."""

    observed_generation: int | None = None
    replicas: int | None = None
    """Engine replicas that exist."""
    ready_replicas: int | None = None
    """Engine replicas ready to serve."""
    desired_replicas: int | None = None
    """Engine replicas the autoscaler wants."""
    selector: str | None = None
    """Label selector of the engine pods (for the scale subresource)."""
    url: str | None = None
    """Where clients send OpenAI-compatible requests."""
    last_scale_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    last_scale_reason: str | None = None
    observed: ObservedSignals = Field(default_factory=ObservedSignals)
    adapters: list[ReplicaAdapters] = Field(default_factory=list, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["replica"]})
    """Per ready engine replica, the LoRA adapters it serves (with spec.adapters; the AdaptersReady condition sums
    them up)."""
    history: TrafficHistory | None = None
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
