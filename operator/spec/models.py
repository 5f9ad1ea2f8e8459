"""The InferenceService spec: one pydantic model, the single source of the CRD schema (operator/crdgen)
and of the checks `floodway up` runs. Field docstrings become the descriptions `kubectl explain` shows."""

from typing import ClassVar, Literal

from floodway.operator.autoscaler.policy import AutoscalerPolicy
from floodway.operator.spec.base import Rule, SpecModel
from pydantic import Field

_POLICY = AutoscalerPolicy()  # the autoscaler's tuned defaults are the spec's defaults


def _section(cls, description: str):
    # A missing section gets all its fields' defaults. The API server checks a default against the section's
    # CEL rules as written (no nested defaulting first), so the default spells every field out.
    return Field(default_factory=cls, description=description, json_schema_extra={"default": cls().dump()})


class EnvVar(SpecModel):
    """An environment variable set in the engine container."""

    name: str = Field(min_length=1)
    value: str = ""


class EngineSpec(SpecModel):
    """How each engine replica serves the model."""

    runtime: Literal["floodway", "vllm"] = "floodway"
    """Serving engine: `floodway` (ours) or `vllm` (the vllm/vllm-openai image)."""
    image: str | None = None
    """Container image; defaults to the operator's image for the runtime."""
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """Weights and activations precision; auto picks bfloat16 on GPUs and float32 on CPUs."""
    max_model_len: int = Field(4096, ge=1)
    """Longest sequence (prompt plus output tokens) a request may have."""
    max_num_seqs: int = Field(64, ge=1)
    """Most sequences batched together in one step."""
    max_num_batched_tokens: int = Field(2048, ge=1)
    """Token budget of one engine step (prefill chunks plus decodes)."""
    block_size: int = Field(16, ge=1, le=256)
    """Tokens per KV-cache block."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Share of GPU memory the engine may use for weights, activations and KV cache."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prompt prefixes."""
    port: int = Field(8000, ge=1, le=65535)
    """Container port of the OpenAI-compatible API."""
    startup_timeout_seconds: int = Field(1800, ge=30)
    """How long model loading may take before the startup probe restarts the container."""
    termination_grace_period_seconds: int = Field(60, ge=0)
    """Time a stopping replica gets to finish its in-flight requests."""
    extra_args: list[str] = Field(default_factory=list)
    """Extra command-line arguments appended to the engine's own."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables of the engine container."""


class Toleration(SpecModel):
    """A Kubernetes toleration of the engine pods."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class ResourcesSpec(SpecModel):
    """What each engine replica gets from its node."""

    gpus: int = Field(1, ge=0)
    """NVIDIA GPUs per replica (nvidia.com/gpu); 0 runs on CPU."""
    gpu_type: str | None = None
    """GPU model (e.g. H100-80GB) for the planner's fit check."""
    gpu_memory_gib: float | None = Field(None, gt=0, alias="gpuMemoryGiB")
    """Memory of one GPU in GiB, when gpuType is not in the planner's table."""
    cpu: str | None = None
    """CPU request and limit of the engine container (a Kubernetes quantity)."""
    memory: str | None = None
    """Memory request and limit of the engine container (a Kubernetes quantity)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the engine pods must match."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Taints the engine pods tolerate."""


class ReplicasSpec(SpecModel):
    """Bounds of the autoscaler. `kubectl scale` sets min."""

    RULES: ClassVar = (Rule("self.min <= self.max", "replicas.min must be less than or equal to replicas.max",
                            lambda r: r.min <= r.max),)

    min: int = Field(1, ge=0)
    """Fewest engine replicas; 0 allows scale to zero (overflow serves while the first one starts)."""
    max: int = Field(4, ge=1)
    """Most engine replicas."""


class SLOSpec(SpecModel):
    """Latency objective the autoscaler and the gateway keep."""

    ttft_ms: float = Field(500, gt=0)
    """Time to first token, in milliseconds."""
    tpot_ms: float = Field(50, gt=0)
    """Time per output token after the first, in milliseconds."""
    attainment: float = Field(0.99, gt=0, le=1)
    """Share of requests that must meet both latency targets."""


class AutoscalingSpec(SpecModel):
    """Scaling policy (floodway.operator.autoscaler.policy; defaults tuned with `floodway simulate`)."""

    enabled: bool = True
    """When false, the service runs replicas.min replicas."""
    interval_seconds: float = Field(_POLICY.interval_s, gt=0)
    """Seconds between two autoscaler decisions."""
    target_concurrency: float = Field(_POLICY.target_concurrency, gt=0)
    """Requests in flight (running plus queued) per replica at which a replica still meets the SLO."""
    kv_cache_target: float = Field(_POLICY.kv_target, gt=0, le=1)
    """KV-cache usage per replica the autoscaler keeps below."""
    scale_up_window_seconds: float = Field(_POLICY.scale_up_window_s, gt=0)
    """Window over which demand is averaged for scaling up."""
    max_scale_up_step: int = Field(_POLICY.max_step_up, ge=1)
    """Most replicas added by one decision (panic mode excepted)."""
    panic_threshold: float = Field(_POLICY.panic_threshold, ge=1)
    """Demand over ready capacity ratio that jumps to the needed replicas at once and blocks scale-down."""
    panic_hold_seconds: float = Field(_POLICY.panic_hold_s, ge=0)
    """How long scale-down stays blocked after a panic."""
    scale_down_stabilization_seconds: float = Field(_POLICY.scale_down_stabilization_s, ge=0)
    """Replicas are removed only if the peak demand of this window fits the smaller pool."""
    scale_down_utilization: float = Field(_POLICY.scale_down_utilization, gt=0, le=1)
    """Share of the smaller pool's capacity the peak demand may use for a scale-down."""
    max_scale_down_step: int = Field(_POLICY.max_step_down, ge=1)
    """Most replicas removed by one decision."""
    scale_down_interval_seconds: float = Field(_POLICY.scale_down_interval_s, ge=0)
    """Least time between a replica change and the next scale-down (the smaller pool's load is seen first)."""
    scale_to_zero_after_seconds: float | None = Field(None, ge=0)
    """Idle time after which a service with replicas.min 0 scales to zero (unset: never)."""
    slo_noise_z: float = Field(_POLICY.slo_noise_z, ge=0)
    """Standard errors below the SLO target attainment must fall before misses add a replica (0: any miss)."""


class SecretKeyRef(SpecModel):
    """A key of a Secret in the service's namespace."""

    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class OverflowSpec(SpecModel):
    """Spill requests to an external OpenAI-compatible API while local capacity is short."""

    RULES: ClassVar = (Rule("!self.enabled || (has(self.baseURL) && has(self.apiKeySecretRef))",
                            "overflow.baseURL and overflow.apiKeySecretRef are required when overflow.enabled is true",
                            lambda o: not o.enabled or (o.base_url is not None and o.api_key_secret_ref is not None)),)

    enabled: bool = False
    """Off by default: data leaves the cluster only when asked to."""
    base_url: str | None = Field(None, alias="baseURL", pattern=r"^https?://")
    """Base URL of the external API, e.g. https://api.example.com/v1."""
    model: str | None = None
    """Model name sent to the external API; defaults to the served model name."""
    api_key_secret_ref: SecretKeyRef | None = None
    """Secret key holding the external API key; pods read it as an environment variable."""
    max_waiting_per_replica: float = Field(8, ge=0)
    """Queued requests per ready replica above which new requests overflow."""
    max_requests_per_minute: int | None = Field(None, ge=0)
    """Budget of overflowed requests per minute."""
    max_tokens_per_minute: int | None = Field(None, ge=0)
    """Budget of overflowed tokens per minute."""


class GatewaySpec(SpecModel):
    """The OpenAI-compatible gateway in front of the engines."""

    replicas: int = Field(1, ge=1)
    """Gateway replicas."""
    image: str | None = None
    """Container image; defaults to the operator's own image."""


class InferenceServiceSpec(SpecModel):
    """A served model: engines, gateway, autoscaling and overflow."""

    model: str = Field(min_length=1)
    """Hugging Face model id, a path inside the image, or a built-in name such as floodway/tiny-llama."""
    served_model_name: str | None = None
    """Model name clients send; defaults to model."""
    engine: EngineSpec = _section(EngineSpec, "How each engine replica serves the model.")
    resources: ResourcesSpec = _section(ResourcesSpec, "What each engine replica gets from its node.")
    replicas: ReplicasSpec = _section(ReplicasSpec, "Bounds of the autoscaler. `kubectl scale` sets min.")
    slo: SLOSpec = _section(SLOSpec, "Latency objective the autoscaler and the gateway keep.")
    autoscaling: AutoscalingSpec = _section(AutoscalingSpec, "Scaling policy.")
    overflow: OverflowSpec = _section(OverflowSpec, "Spill to an external OpenAI-compatible API.")
    gateway: GatewaySpec = _section(GatewaySpec, "The OpenAI-compatible gateway in front of the engines.")

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model
