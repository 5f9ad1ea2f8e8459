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
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
