"""The InferenceService spec: one pydantic model, the single source of the CRD schema (operator/crdgen)
and of the checks `floodway up` runs. Field docstrings become the descriptions `kubectl explain` shows."""

import posixpath
import re
from typing import Annotated, Any, ClassVar, Literal

from floodway.operator.runtimes import RUNTIMES
from floodway.operator.spec.base import Rule, SpecModel
from floodway.operator.spec.model_source import MODELS_DIR, CacheClaim, ModelClaim, ModelShapeSpec
from pydantic import Field, WithJsonSchema

# A Kubernetes resource quantity (the API server's own pattern), so a typo fails at apply, not at pod creation.
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
            r"|(\.[0-9]+))))?$")
Quantity = Annotated[str, Field(pattern=QUANTITY)]

# Kubernetes objects passed through as written (affinity, pod template, network peers): the API server checks
# them when the operator applies what embeds them.
FreeForm = Annotated[dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})]


IntOrPercent = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]


def _int_or_percent_cel(field: str) -> str:
    return (f"(!has(self.{field}) || (type(self.{field}) == string ? self.{field}.matches('^[0-9]+%$') "
            f": self.{field} >= 0))")


def _int_or_percent(v: int | str | None) -> bool:
    return v is None or (isinstance(v, int) and v >= 0) or (isinstance(v, str) and re.fullmatch(r"[0-9]+%", v))

# Runtimes that cannot shard a model over GPUs: more than one GPU per replica would sit idle, so it is refused.
SINGLE_GPU_RUNTIMES = tuple(name for name, r in RUNTIMES.items() if r.tensor_parallel_flag is None)


def _section(cls, description: str):
    # A missing section gets all its fields' defaults. The API server checks a default against the section's
    # CEL rules as written (no nested defaulting first), so the default spells every field out.
    return Field(default_factory=cls, description=description, json_schema_extra={"default": cls().dump()})


class SecretKeyRef(SpecModel):
    """A key of a Secret in the service's namespace."""

    name: str = Field(min_length=1)
    """Name of the Secret."""
    key: str = Field(min_length=1)
    """Key inside the Secret."""


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the service's namespace."""

    name: str = Field(min_length=1)
    """Name of the ConfigMap."""
    key: str = Field(min_length=1)
    """Key inside the ConfigMap."""


class EnvVarSource(SpecModel):
    """Where a variable's value comes from; the kubelet reads it, the operator never does."""

    RULES: ClassVar = (Rule("has(self.secretKeyRef) != has(self.configMapKeyRef)",
                            "env valueFrom takes exactly one of secretKeyRef and configMapKeyRef",
                            lambda v: (v.secret_key_ref is None) != (v.config_map_key_ref is None)),)

    secret_key_ref: SecretKeyRef | None = None
    """A key of a Secret (a missing Secret or key shows as a PodsHealthy condition and an event)."""
    config_map_key_ref: ConfigMapKeyRef | None = None
    """A key of a ConfigMap."""


class EnvVar(SpecModel):
    """An environment variable set in the engine container: a value, or valueFrom a Secret or ConfigMap key."""

    RULES: ClassVar = (Rule("!(has(self.value) && has(self.valueFrom))", "env takes value or valueFrom, not both",
                            lambda v: v.value is None or v.value_from is None),)

    name: str = Field(min_length=1)
    """Variable name."""
    value: str | None = None
    """Literal value (never put a credential here: use valueFrom.secretKeyRef)."""
    value_from: EnvVarSource | None = None
    """Read the value from a Secret or ConfigMap key when the container starts."""


class SpeculativeSpec(SpecModel):
    """Speculative decoding: a proposer drafts tokens that one forward pass of the model verifies, so a step
    can yield several tokens at the price of one. vLLM's --speculative-config, whose keys are these fields'
    snake_case names; what each runtime takes: docs/guides/runtimes.md."""

    RULES: ClassVar = (
        Rule("self.method != 'draft_model' || has(self.model)",
             "engine.speculative.model is required for method draft_model",
             lambda s: s.method != "draft_model" or s.model is not None),
        Rule("self.method != 'ngram' || !has(self.model)", "engine.speculative.model is for method draft_model",
             lambda s: s.method != "ngram" or s.model is None),
        Rule("self.method == 'ngram' || !(has(self.promptLookupMin) || has(self.promptLookupMax))",
             "engine.speculative.promptLookupMin and promptLookupMax are for method ngram",
             lambda s: s.method == "ngram" or (s.prompt_lookup_min is None and s.prompt_lookup_max is None)),
        Rule("!has(self.promptLookupMin) || !has(self.promptLookupMax) || self.promptLookupMin <= self.promptLookupMax",
             "engine.speculative.promptLookupMin must be less than or equal to promptLookupMax",
             lambda s: None in (s.prompt_lookup_min, s.prompt_lookup_max)
             or s.prompt_lookup_min <= s.prompt_lookup_max),
    )

    method: Literal["ngram", "draft_model"]
    """ngram: prompt lookup, drafts copied from where the last tokens occurred before in the prompt or the output
    (no extra weights; pays on answers that quote their input); draft_model: a smaller model with the same
    tokenizer drafts them."""
    num_speculative_tokens: int = Field(ge=1)
    """Most draft tokens verified per sequence and step (our engine drafts fewer, or none, where the measured
    acceptance and the batch size say it would not pay)."""
    prompt_lookup_min: int | None = Field(None, ge=1)
    """ngram: the shortest run of last tokens matched. Unset: the runtime's default."""
    prompt_lookup_max: int | None = Field(None, ge=1)
    """ngram: the longest run of last tokens matched (tried first). Unset: the runtime's default."""
    model: str | None = Field(None, min_length=1)
    """draft_model: the draft's Hugging Face id, path inside the image, or built-in name."""


def _in(field: str, values) -> str:
    return f"self.{field} in {list(values)}"


def _runtime_rules() -> tuple[Rule, ...]:
    """Each runtime refuses the engine.quantization values and engine.speculative settings it cannot honour
    (the runtime table, operator/runtimes.py, says which)."""
    rules = []
    for r in RUNTIMES.values():
        off = f"self.runtime != '{r.name}'"
        note = f" ({r.quantization_note})" if r.quantization_note else ""
        rules.append(Rule(f"{off} || {_in('quantization', r.quantizations)}",
                          f"engine.runtime {r.name} takes engine.quantization {', '.join(r.quantizations)}{note}",
                          lambda e, r=r: e.runtime != r.name or e.quantization in r.quantizations))
        spec_off = f"{off} || !has(self.speculative)"
        methods = (f"takes engine.speculative.method {' or '.join(r.speculative_methods)}" if r.speculative_methods
                   else "takes no engine.speculative (its own speculative flags go in engine.extraArgs)")
        rules.append(Rule(f"{spec_off} || {_in('speculative.method', r.speculative_methods)}",
                          f"engine.runtime {r.name} {methods}",
                          lambda e, r=r: e.runtime != r.name or e.speculative is None
                          or e.speculative.method in r.speculative_methods))
        if r.speculative_methods and (unsupported := [f for f in SpeculativeSpec.model_fields
                                                      if f not in r.speculative_fields]):
            camel = [SpeculativeSpec.model_fields[f].alias for f in unsupported]
            rules.append(Rule(f"{spec_off} || !({' || '.join(f'has(self.speculative.{c})' for c in camel)})",
                              f"engine.runtime {r.name} takes no engine.speculative.{', '.join(camel)}",
                              lambda e, r=r, u=unsupported: e.runtime != r.name or e.speculative is None
                              or all(getattr(e.speculative, f) is None for f in u)))
        if r.max_speculative_tokens:
            rules.append(Rule(f"{spec_off} || self.speculative.numSpeculativeTokens <= {r.max_speculative_tokens}",
                              f"engine.runtime {r.name} takes engine.speculative.numSpeculativeTokens up to "
                              f"{r.max_speculative_tokens}",
                              lambda e, r=r: e.runtime != r.name or e.speculative is None
                              or e.speculative.num_speculative_tokens <= r.max_speculative_tokens))
    return tuple(rules)


# The runtimes that take vLLM's --scheduling-policy priority (render/runtime_args.py).
PRIORITY_RUNTIMES = ("floodway", "vllm")


class EngineSpec(SpecModel):
    """How each engine replica serves the model."""

    RULES: ClassVar = (*_runtime_rules(), Rule(
        f"self.schedulingPolicy == 'fcfs' || self.runtime in {list(PRIORITY_RUNTIMES)}",
        f"engine.schedulingPolicy priority is served by engine.runtime {' / '.join(PRIORITY_RUNTIMES)}",
        lambda e: e.scheduling_policy == "fcfs" or e.runtime in PRIORITY_RUNTIMES))

    runtime: Literal["floodway", "vllm", "sglang", "tgi", "llamacpp"] = "floodway"
    """Serving engine: `floodway` (ours), `vllm`, `sglang`, `tgi` (Hugging Face TGI) or `llamacpp` (llama.cpp's
    llama-server for CPU pools; model is a GGUF file). Their flags and metrics: operator/runtimes.py."""
    image: str | None = None
    """Container image; defaults to the operator's image for the runtime."""
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """Weights and activations precision; auto picks bfloat16 on GPUs and float32 on CPUs."""
    quantization: Literal["auto", "none", "gguf", "int8", "int4", "awq", "gptq", "compressed-tensors", "fp8"] = "auto"
    """Weights' format (vLLM's --quantization): auto, the checkpoint's own (a GGUF file's types, a
    quantization_config's method); none, float; gguf, a .gguf file as it ships; int8 or int4, weight-only with
    group scales, quantized at load of a float checkpoint; awq, gptq, compressed-tensors or fp8 checkpoints (fp8
    also quantizes a float one at load). What each runtime takes: docs/guides/runtimes.md. The FitsGPU check
    sizes the weights by it."""
    max_model_len: int = Field(4096, ge=1)
    """Longest sequence (prompt plus output tokens) a request may have."""
    max_num_seqs: int = Field(64, ge=1)
    """Most sequences batched together in one step."""
    max_num_batched_tokens: int = Field(2048, ge=1)
    """Token budget of one engine step (prefill chunks plus decodes)."""
    block_size: int = Field(16, ge=1, le=256)
    """Tokens per KV-cache block (runtime vllm on CPU: rounded up to a multiple of 32, what its attention takes)."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Share of GPU memory the engine may use for weights, activations and KV cache."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prompt prefixes."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """Which request the engine serves first (vLLM's --scheduling-policy): fcfs, by arrival; priority, by each
    request's `priority` field (lower first, ties by arrival; fcfs refuses any but 0), a request with no seat or KV
    blocks preempting lower-priority running ones, the lowest-priority first; in our engine a prompt being
    prefilled also yields to higher-priority arrivals. Runtimes floodway and vllm."""
    port: int = Field(8000, ge=1, le=65535)
    """Container port of the OpenAI-compatible API."""
    startup_timeout_seconds: int = Field(1800, ge=30)
    """How long model loading may take before the startup probe restarts the container."""
    termination_grace_period_seconds: int = Field(60, ge=0)
    """Time a stopping replica gets to finish its in-flight requests."""
    speculative: SpeculativeSpec | None = None
    """Speculative decoding (unset: off)."""
    extra_args: list[str] = Field(default_factory=list)
    """Extra command-line arguments appended to the engine's own."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables of the engine container (value, or valueFrom.secretKeyRef for credentials)."""
    hf_token_secret_ref: SecretKeyRef | None = None
    """Secret key holding a Hugging Face token for gated Hub models: the pod gets it as HF_TOKEN through
    valueFrom.secretKeyRef, so it never appears in the InferenceService or the Deployment."""
    pod_template: FreeForm | None = None
    """A pod template ({metadata, spec}) merged over the rendered engine pod template by strategic merge (lists
    of containers, volumes, env, ... merge by name; null deletes a field), for settings without a field here."""


class Toleration(SpecModel):
    """A Kubernetes toleration of the engine pods."""

    key: str | None = None
    """Taint key (empty with operator Exists: every taint)."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (the default)."""
    value: str | None = None
    """Taint value for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate (empty: all)."""
    toleration_seconds: int | None = None
    """How long a NoExecute taint is tolerated."""


class ResourcesSpec(SpecModel):
    """What each engine replica gets from its node."""

    gpus: int = Field(1, ge=0)
    """NVIDIA GPUs per replica (nvidia.com/gpu); 0 runs on CPU."""
    gpu_type: str | None = None
    """GPU model, a row of the planner's table operator/planner/gpus.yaml (e.g. h100-80gb, l4), for the fit
    check; with gpus > 0 it also selects nodes: the engine pods require a node whose nvidia.com/gpu.product label
    (set by NVIDIA GPU feature discovery) names this GPU. A nodeSelector or affinity.nodeAffinity of your own
    replaces that rule (affinity: {nodeAffinity: {}} turns it off, e.g. where nodes lack the label)."""
    gpu_memory_gib: float | None = Field(None, gt=0, alias="gpuMemoryGiB")
    """Memory of one GPU in GiB, when gpuType is not in the planner's table."""
    gpu_hourly_price: float | None = Field(None, ge=0)
    """Price of one GPU per hour in dollars, for the cost figures (GPU spend, $ per 1k requests). Unset: the
    planner's table price of gpuType, where the table has one."""
    cpu: Quantity | None = None
    """CPU request of the engine container (no CPU limit: throttling would stall token streams). Unset:
    2 per GPU, 1 on CPU, so the pod is never BestEffort (evicted first) while it loads weights."""
    memory: Quantity | None = None
    """Memory request and limit of the engine container. Unset: a request of 8Gi per GPU (2Gi on CPU), no limit."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the engine pods must match."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Taints the engine pods tolerate."""
    affinity: FreeForm | None = None
    """Kubernetes affinity of the engine pods (nodeAffinity, podAffinity, podAntiAffinity), as in a pod spec."""
    priority_class_name: str | None = None
    """PriorityClass of the engine pods (e.g. to preempt batch jobs on a GPU pool)."""
    runtime_class_name: str | None = None
    """RuntimeClass of the engine pods (e.g. nvidia where the GPU runtime is not the node's default)."""

    def requests(self) -> dict[str, str]:
        """CPU and memory requests: the spec's, else the defaults above."""
        return {"cpu": self.cpu or (str(2 * self.gpus) if self.gpus else "1"),
                "memory": self.memory or (f"{8 * self.gpus}Gi" if self.gpus else "2Gi")}


class ReplicasSpec(SpecModel):
    """Bounds of the autoscaler, and the count an external autoscaler sets (`kubectl scale` sets count)."""

    RULES: ClassVar = (Rule("self.min <= self.max", "replicas.min must be less than or equal to replicas.max",
                            lambda r: r.min <= r.max),)

    min: int = Field(1, ge=0)
    """Fewest engine replicas; 0 allows scale to zero (overflow serves while the first one starts)."""
    max: int = Field(4, ge=1)
    """Most engine replicas."""
    count: int = Field(1, ge=0)
    """Engine replicas wanted by an external autoscaler: the scale subresource's replica count, set by HPA,
    KEDA or `kubectl scale`. Followed (within min and max) only when autoscaling.mode is external."""

    def clamp(self, n: int) -> int:
        return max(self.min, min(self.max, n))


class SLOSpec(SpecModel):
    """Latency objective the autoscaler and the gateway keep."""

    ttft_ms: float = Field(500, gt=0)
    """Time to first token, in milliseconds."""
    tpot_ms: float = Field(50, gt=0)
    """Time per output token after the first, in milliseconds."""
    attainment: float = Field(0.99, gt=0, le=1)
    """Share of requests that must meet both latency targets."""


class AutoscalingSpec(SpecModel):
    """Scaling policy. The autoscaler (operator/autoscaler/policy.py) takes these fields under the same names; the
    defaults are the ones `floodway simulate` tuned."""

    enabled: bool = True
    """When false, the service runs replicas.min replicas."""
    mode: Literal["floodway", "external"] = "floodway"
    """floodway: the operator's own autoscaler sets the replicas. external: HPA or KEDA sets replicas.count
    through the scale subresource and the operator follows it (see the chart's examples/external-autoscaling)."""
    interval_seconds: float = Field(5.0, gt=0)
    """Seconds between two autoscaler decisions."""
    target_concurrency: float | None = Field(None, gt=0)
    """Requests in flight (running plus queued) per replica at which a replica still meets the SLO. Unset: 5/8 of
    engine.maxNumSeqs (the rest of the batch is headroom for the arrivals of a decision interval)."""
    kv_cache_target: float = Field(0.85, gt=0, le=1)
    """KV-cache usage per replica the autoscaler keeps below."""
    scale_up_window_seconds: float = Field(60.0, gt=0)
    """Window over which demand is averaged for scaling up."""
    max_scale_up_step: int = Field(4, ge=1)
    """Most replicas added by one decision (panic mode excepted)."""
    panic_threshold: float = Field(2.0, ge=1)
    """Demand over ready capacity ratio that jumps to the needed replicas at once and blocks scale-down."""
    panic_hold_seconds: float = Field(60.0, ge=0)
    """How long scale-down stays blocked after a panic."""
    scale_down_stabilization_seconds: float = Field(180.0, ge=0)
    """Replicas are removed only if the peak demand of this window fits the smaller pool."""
    scale_down_utilization: float = Field(0.7, gt=0, le=1)
    """Share of the smaller pool's capacity the peak demand may use for a scale-down."""
    max_scale_down_step: int = Field(1, ge=1)
    """Most replicas removed by one decision."""
    scale_down_interval_seconds: float = Field(30.0, ge=0)
    """Least time between a replica change and the next scale-down (the smaller pool's load is seen first)."""
    scale_to_zero_after_seconds: float | None = Field(None, ge=0)
    """Idle time after which a service with replicas.min 0 scales to zero (unset: never)."""
    slo_noise_z: float = Field(2.0, ge=0)
    """Standard errors below the SLO target attainment must fall before misses add a replica (0: any miss)."""
    prefill_tokens_per_second: float = Field(0.0, ge=0)
    """A replica's prefill rate in prompt tokens/s, from an engine profile (`floodway bench engine --profile-out
    FILE`, then `floodway simulate --profile FILE` prints this field): demand then also counts the prompt tokens
    arriving, not only the requests in flight. 0: requests only."""
    decode_sequences: int = Field(0, ge=0)
    """Sequences one replica decodes within slo.tpotMs, from the same profile (printed beside
    prefillTokensPerSecond): a replica is sized for at most this many requests in flight (targetConcurrency
    where that is fewer). 0: targetConcurrency alone."""
    overflow_share: float = Field(0.04, ge=0, lt=1)
    """With overflow enabled, the overflow budget: the share of the requests, and of their tokens (prompt plus
    completion, as the gateway estimates them), that may go to the overflow API over the last half hour (decayed), so
    a long prompt spends it by its tokens. The autoscaler leaves that share of requests to the API instead of paying
    every overflow back with replicas; once more is spent, it holds capacity as with 0. Where holding the budget
    would break the SLO, `priority` says which wins; the condition OverflowBudget reports the share spent in both
    units. 0: pay all back (with priority budget: no overflow)."""
    forecast_lead_seconds: float = Field(300.0, ge=0)
    """Foresight from the service's own history: the operator keeps its requests and prompt tokens per minute for two
    weeks (the ConfigMap <name>-history, which survives an operator restart) and keeps ready the replicas for the
    traffic that came on each of two earlier days (the last two; yesterday and a week ago; one and two weeks ago) within
    this many seconds of the same time of day, so replicas are up when a recurring peak comes. At least a replica's
    cold start (scheduling, image pull, model load). 0: no forecast, the autoscaler reacts only."""
    priority: Literal["slo", "budget"] = "slo"
    """What wins when the overflow budget and the SLO cannot both hold (a burst shorter than a cold start, replicas.max
    reached, prompts too long for any replica to prefill within slo.ttftMs): slo overflows what local capacity cannot
    serve within the SLO, past the budget if need be; budget caps overflow at overflowShare in the gateway (requests
    past it are served locally, late), so the budget holds from the service's start. The condition OverflowBudget
    says which the policy chose (BudgetExceededForSLO, SLOMissedForBudget)."""


class OverflowPricing(SpecModel):
    """What the overflow API bills, in dollars per million tokens (prompt and output priced apart, as APIs do)."""

    input_per_million_tokens: float | None = Field(None, ge=0)
    """Dollars per million prompt tokens sent to the overflow API. Unset: overflow spend is not counted."""
    output_per_million_tokens: float | None = Field(None, ge=0)
    """Dollars per million output tokens the overflow API returns. Unset: overflow spend is not counted."""


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
    models: dict[str, str] | None = None
    """Local model or adapter name -> the external API's model name for it. A request for an adapter with no
    entry never overflows (the API has never heard of it): it is held and served locally, or gets 429 with
    Retry-After when the hold queue is full. The served model without an entry keeps overflow.model."""
    api_key_secret_ref: SecretKeyRef | None = None
    """Secret key holding the external API key; pods read it as an environment variable."""
    max_waiting_per_replica: float = Field(4.0, ge=0)
    """Queued requests per ready replica above which new requests overflow."""
    max_requests_per_minute: int | None = Field(None, ge=0)
    """Budget of overflowed requests per minute."""
    max_tokens_per_minute: int | None = Field(None, ge=0)
    """Budget of overflowed tokens per minute."""
    pricing: OverflowPricing = _section(OverflowPricing, "What the overflow API bills per million tokens.")


class RoutingSpec(SpecModel):
    """How the gateway picks an engine for each request: the gateway config's `routing` settings of the same
    names (README, "Prefix-aware routing")."""

    prefix_aware: bool = True
    """Prefer the engine likely to hold the prompt's prefix in its KV cache; false: route on load only."""
    prefix_weight: float = Field(4.0, ge=0)
    """Score a whole-prompt prefix hit is worth, in queued requests."""
    prefix_load_cap: float = Field(1.3, ge=1)
    """An engine takes a request for its cache only while the work sent there lately (requests and their
    uncached prompt tokens) stays within this multiple of the pool's mean, plus prefixLoadSlack."""
    prefix_load_slack: float = Field(1.0, ge=0)
    """Requests' worth of work an engine may take for its cache beyond prefixLoadCap times the pool's mean."""
    prefix_min_gain: float = Field(0.1, ge=0, le=1)
    """Share of the prompt an engine must hold beyond what every engine holds to be preferred for it."""
    prefill_unit_tokens: float = Field(512.0, ge=0)
    """Prompt tokens an engine has yet to prefill (beyond its prefix cache) that weigh as much as one request
    there in the load score (0: not counted)."""


# A tenant's name: a Prometheus label value and a line of the tenants file, so no spaces.
TENANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class TenantLimitsSpec(SpecModel):
    """The limits the gateway holds one tenant to, each over its own counters (unset: no limit), and its class. A
    request over a rate limit gets 429 with Retry-After and OpenAI's x-ratelimit-* headers. Tokens are the gateway's
    estimate, prompt (characters / 4) plus the completion tokens the request allows, charged as it arrives. Each
    gateway replica keeps its own counters: with gateway.replicas 2, a tenant spread over both gets up to twice
    these."""

    max_requests_per_minute: int | None = Field(None, ge=1)
    """Requests per minute (a bucket refilling evenly over the minute, holding at most a minute's worth)."""
    max_tokens_per_minute: int | None = Field(None, ge=1)
    """Estimated tokens per minute (same bucket; a request larger than a minute's worth costs the whole of it)."""
    max_concurrent_requests: int | None = Field(None, ge=1)
    """Requests in flight at once (held in the gateway's queue, or streaming); a slot frees when the answer ends,
    the client goes away or the engine fails."""
    max_overflow_tokens_per_minute: int | None = Field(None, ge=0)
    """Estimated tokens per minute of this tenant's requests that may go to the overflow API (its spend cap);
    past it, its requests stay local (held while no engine is ready). 0: this tenant never overflows."""
    default_class: str | None = Field(None, min_length=1, max_length=63)
    """The class (spec.classes) of this tenant's requests; a request may pick a lower one (a higher priority number)
    with the x-floodway-class header. Unset: no class (the service's own SLO and overflow rule, priority 0)."""


class TenantSpec(TenantLimitsSpec):
    """One tenant's limits: the fields it sets replace gateway.tenants.default's."""

    name: str = Field(min_length=1, max_length=63, pattern=TENANT_NAME)
    """The tenant, as the tenants file names it."""


class TenantsSpec(SpecModel):
    """The limits each tenant is held to (gateway.tenantsSecretRef names the tenants)."""

    RULES: ClassVar = (Rule("!has(self.limits) || self.limits.all(t, self.limits.exists_one(u, u.name == t.name))",
                            "gateway.tenants.limits[].name must be unique",
                            lambda t: len({x.name for x in t.limits}) == len(t.limits)),)

    default: TenantLimitsSpec = _section(TenantLimitsSpec, "The limits of each tenant `limits` does not list, "
                                         "each over its own counters.")
    limits: list[TenantSpec] = Field(default_factory=list, max_length=256)
    """Tenants with limits of their own (fields left unset: default's)."""


class SLOClassSpec(SpecModel):
    """A class of traffic (interactive, standard, batch): its place in the engines' queues and its overflow rule."""

    name: str = Field(min_length=1, max_length=63, pattern=TENANT_NAME)
    """The class, as tenants' defaultClass and the x-floodway-class request header name it."""
    priority: int = 0
    """The `priority` the gateway sends each of its requests to the engines (lower first, vLLM's convention); they
    take it with engine.schedulingPolicy priority (with fcfs the gateway sends none)."""
    overflow: bool = True
    """Whether its requests may go to the overflow API when local capacity is short; false: they stay local (held
    while no engine is ready), whatever the triggers say."""
    ttft_ms: float | None = Field(None, gt=0)
    """Its time to first token SLO in milliseconds: the overflow rule's predicted-TTFT trigger for its requests
    (unset: slo.ttftMs), what the gateway's TTFT attainment counts them against, and, with queueLimit, the wait
    past which its requests held in the gateway are refused (unset: none)."""
    tpot_ms: float | None = Field(None, gt=0)
    """Its time per output token SLO in milliseconds: what the gateway's TPOT attainment counts its streamed answers
    against (unset: slo.tpotMs). The engines' prefill budget protects slo.tpotMs: to hold a stricter class's, set
    slo.tpotMs to it."""
    queue_limit: int | None = Field(None, ge=0)
    """How many of its requests may wait in the gateway's queue at once while local capacity is short and they may
    not overflow (overflow false, or the overflow API unavailable to them), released fairly between tenants; past
    it, once its ttftMs cannot be met by waiting, or after the gateway's hold timeout (10 s), a request gets 429 with
    Retry-After. 0: refused at once when short. Unset: sent to the engines, which queue it (held in the gateway only
    while none is ready)."""
    max_replicas: int | None = Field(None, ge=0)
    """The most replicas this class's demand alone scales the service to (unset: no cap); its SLO attainment (TTFT
    and TPOT) adds no replica past it either. Its requests still use whatever capacity the other classes leave, and with
    engine.schedulingPolicy priority give way to them. Its demand is its requests in flight at the gateways."""


class GatewaySpec(SpecModel):
    """The OpenAI-compatible gateway in front of the engines."""

    replicas: int = Field(2, ge=1)
    """Gateway replicas, spread across nodes; with more than one a PodDisruptionBudget keeps one serving
    through node drains (the gateway is the service's only way in)."""
    image: str | None = None
    """Container image; defaults to the operator's own image."""
    api_keys_secret_ref: SecretKeyRef | None = None
    """Secret key holding the API keys clients must send (`Authorization: Bearer <key>`), one per line; mounted
    into the gateway pods as a file (the operator never reads it). Unset, with no tenantsSecretRef: the gateway
    takes any client."""
    tenants_secret_ref: SecretKeyRef | None = None
    """Secret key holding the tenants file: one `<api key> <tenant>` per line (`#` starts a comment line), mounted
    into the gateway pods as a file (the operator never reads it). Its keys are client keys as apiKeysSecretRef's
    are: with either set, a key in neither gets 401. A client it does not name (no file, or a key only
    apiKeysSecretRef lists) is the tenant `anonymous`."""
    routing: RoutingSpec = _section(RoutingSpec, "How the gateway picks an engine for each request.")
    tenants: TenantsSpec = _section(TenantsSpec, "The limits each tenant is held to.")


class StorageSpec(SpecModel):
    """Where the engine finds the model and keeps its cache."""

    model_claim: ModelClaim | None = None
    """Serve the model from a PersistentVolumeClaim instead of downloading it: spec.model is then only the
    name clients send. A missing or unbound claim shows as a StorageAvailable condition and an event."""
    cache_claim: CacheClaim | None = None
    """A PersistentVolumeClaim as the cache (HF_HOME, FLOODWAY_CACHE), so a new replica finds the weights a
    previous one downloaded. Unset: an emptyDir per pod (every replica downloads again)."""
    cache_size_limit: Quantity = "100Gi"
    """Size limit of the per-pod cache emptyDir when there is no cacheClaim (the kubelet evicts a pod past it)."""
    shm_size_limit: Quantity = "2Gi"
    """Size limit of /dev/shm (memory-backed; counts against the container's memory)."""

    def model_path(self) -> str | None:
        """Where the engine loads the model from, when it comes from a claim."""
        c = self.model_claim
        return None if c is None else posixpath.join(MODELS_DIR, c.path).rstrip("/")


class RolloutSpec(SpecModel):
    """How the engine Deployment replaces pods on a spec change."""

    RULES: ClassVar = (Rule(f"{_int_or_percent_cel('maxSurge')} && {_int_or_percent_cel('maxUnavailable')}",
                            "rollout.maxSurge and rollout.maxUnavailable must be non-negative integers or "
                            "percentages such as 25%",
                            lambda r: bool(_int_or_percent(r.max_surge) and _int_or_percent(r.max_unavailable))),)

    max_surge: IntOrPercent | None = None
    """Extra pods during a rollout. Unset: 0 when the replicas use GPUs (a fixed GPU pool has no spare GPU for
    a surge pod, which would stay Pending), else 1."""
    max_unavailable: IntOrPercent | None = None
    """Pods that may be down during a rollout. Unset: 1 when the replicas use GPUs (overflow covers the gap),
    else 0 (a new pod is ready before an old one goes)."""


class NetworkPolicySpec(SpecModel):
    """The NetworkPolicy of the engine pods: only the gateway and the operator's metrics scraper reach them."""

    enabled: bool = True
    """Render the NetworkPolicy (it takes effect where the cluster's network plugin enforces policies)."""
    allow_from: list[FreeForm] = Field(default_factory=list)
    """More NetworkPolicyPeers admitted to the engine port, e.g. your Prometheus namespace."""


LORA_RUNTIMES = ("floodway", "vllm")  # the runtimes whose flags serve LoRA adapters (render/runtime_args.py)


class AdapterSpec(SpecModel):
    """A LoRA adapter (PEFT format) served next to the base model: clients name it in `model`."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$")
    """Model name clients send for it."""
    source: str = Field(min_length=1)
    """Its folder, as spec.model's: a path inside the image, a Hugging Face id (engine.hfTokenSecretRef for
    gated ones; runtimes that download it), or with storage.modelClaim a folder inside the claim."""


class InferenceServiceSpec(SpecModel):
    """A served model: engines, gateway, autoscaling and overflow."""

    RULES: ClassVar = (Rule(
        f"!(self.engine.runtime in {list(SINGLE_GPU_RUNTIMES)}) || self.resources.gpus <= 1",
        f"resources.gpus > 1 needs tensor parallelism, which engine.runtime {' / '.join(SINGLE_GPU_RUNTIMES)} "
        "lacks: use gpus: 1 and more replicas",
        lambda s: s.engine.runtime not in SINGLE_GPU_RUNTIMES or s.resources.gpus <= 1),
        # has(): a list the user left out is absent in the API server's object (no default is stored), and a CEL
        # rule that reads an absent field fails the request.
        Rule("!has(self.adapters) || self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name) "
             "&& a.name != self.model && (!has(self.servedModelName) || a.name != self.servedModelName))",
             "adapters[].name must be unique and differ from the served model name",
             lambda s: len({a.name for a in s.adapters}) == len(s.adapters)
             and s.model_name not in {a.name for a in s.adapters} and s.model not in {a.name for a in s.adapters}),
        Rule(f"!has(self.adapters) || size(self.adapters) == 0 || self.engine.runtime in {list(LORA_RUNTIMES)}",
             f"adapters are served by engine.runtime {' / '.join(LORA_RUNTIMES)} (--enable-lora --lora-modules)",
             lambda s: not s.adapters or s.engine.runtime in LORA_RUNTIMES),
        Rule("!has(self.classes) || self.classes.all(c, self.classes.exists_one(d, d.name == c.name))",
             "classes[].name must be unique", lambda s: len({c.name for c in s.classes}) == len(s.classes)),
        Rule("(!has(self.gateway.tenants.default.defaultClass) || (has(self.classes) && self.classes.exists(c, "
             "c.name == self.gateway.tenants.default.defaultClass))) && (!has(self.gateway.tenants.limits) || "
             "self.gateway.tenants.limits.all(t, !has(t.defaultClass) || (has(self.classes) && "
             "self.classes.exists(c, c.name == t.defaultClass))))",
             "gateway.tenants defaultClass must name one of classes[].name",
             lambda s: {t.default_class for t in (s.gateway.tenants.default, *s.gateway.tenants.limits)} - {None}
             <= {c.name for c in s.classes}),)

    model: str = Field(min_length=1)
    """Hugging Face model id, a path inside the image, or a built-in name such as floodway/tiny-llama. With
    storage.modelClaim, only the name clients send (the files come from the claim)."""
    served_model_name: str | None = None
    """Model name clients send; defaults to model."""
    model_shape: ModelShapeSpec | None = None
    """The model's shape, for the FitsGPU check when its config.json is out of the operator's reach."""
    adapters: list[AdapterSpec] = Field(default_factory=list, max_length=64)
    """LoRA adapters each engine serves from startup, batched with the base model's requests. One that does not load
    is left out while the base model serves on; status.adapters and the AdaptersReady condition name it and why."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """Names of Secrets for pulling the engine and gateway images from a private registry."""
    engine: EngineSpec = _section(EngineSpec, "How each engine replica serves the model.")
    resources: ResourcesSpec = _section(ResourcesSpec, "What each engine replica gets from its node.")
    replicas: ReplicasSpec = _section(ReplicasSpec, "Bounds of the autoscaler, and the count an external one sets.")
    slo: SLOSpec = _section(SLOSpec, "Latency objective the autoscaler and the gateway keep.")
    autoscaling: AutoscalingSpec = _section(AutoscalingSpec, "Scaling policy.")
    overflow: OverflowSpec = _section(OverflowSpec, "Spill to an external OpenAI-compatible API.")
    gateway: GatewaySpec = _section(GatewaySpec, "The OpenAI-compatible gateway in front of the engines.")
    storage: StorageSpec = _section(StorageSpec, "Where the engine finds the model and keeps its cache.")
    rollout: RolloutSpec = _section(RolloutSpec, "How the engine Deployment replaces pods on a spec change.")
    network_policy: NetworkPolicySpec = _section(NetworkPolicySpec, "Who may reach the engine pods.")
    classes: list[SLOClassSpec] = Field(default_factory=list, max_length=16)
    """Classes of traffic, each with its priority in the engines and its overflow rule; a tenant's requests are of
    its defaultClass (gateway.tenants)."""

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    @property
    def model_source(self) -> str:
        """What the engine loads: the claim's folder when the model is on a volume, else spec.model."""
        return self.storage.model_path() or self.model

    def adapter_sources(self) -> list[tuple[str, str]]:
        """(name, what the engine loads) per adapter: inside the claim when the model is on a volume."""
        claim = self.storage.model_claim
        return [(a.name, posixpath.join(MODELS_DIR, a.source) if claim else a.source) for a in self.adapters]
