"""What differs between the serving engines an InferenceService can run, in one table: its readiness and liveness
paths, how it shards a model over GPUs, its image, and its names for the load and latency metrics the gateway and
the autoscaler read. The command line each takes for the spec's settings is in render/runtime_args.py (this table
sits below the spec, which reads it).

Our names are vLLM's (our engine exports them too); every other runtime maps its own onto them. Torch-free:
the gateway, the operator and the autoscaler all import it. Every runtime takes the spec's port by flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from floodway.engine.quant import formats as quant_formats
from floodway.engine.spec_decode import config as spec_config


@dataclass(frozen=True)
class MetricNames:
    """A runtime's Prometheus names for the signals we read; the first name present wins (engines renamed
    some across versions). A signal the runtime does not export is () and reads as 0 (gauges) or as no
    observations (histograms, counters)."""

    running: tuple[str, ...] = ()  # gauge: requests in the running batch
    waiting: tuple[str, ...] = ()  # gauge: requests queued in the engine
    kv_usage: tuple[str, ...] = ()  # gauge: share 0..1 of the KV cache in use
    ttft: tuple[str, ...] = ()  # histogram, seconds
    tpot: tuple[str, ...] = ()  # histogram, seconds: time per output token, one observation per request
    itl: tuple[str, ...] = ()  # histogram, seconds: one per token, read when the runtime has no per-request TPOT
    finished: tuple[str, ...] = ()  # counter: requests finished

    def gauges(self) -> dict[str, str]:
        """{runtime gauge name: our signal} for running, waiting and kv_usage."""
        return {name: signal for signal in ("running", "waiting", "kv_usage") for name in getattr(self, signal)}


@dataclass(frozen=True)
class Runtime:
    name: str
    image: str | None  # the upstream image users run (None: the operator's own); engine.image overrides it
    metrics: MetricNames
    ready_path: str  # 200 only while it should receive traffic
    health_path: str = "/health"  # 200 while the process is alive (liveness, startup)
    command: tuple[str, ...] = ()  # empty: the image's entrypoint
    tensor_parallel_flag: str | None = None  # shards the model over the pod's GPUs; None: one GPU at most
    full_status: int = 429  # its answer when its own queue is full: load, not ill health (it stays in rotation)
    # engine.quantization: the values it honours, and its flag (None: no flag, the model file decides; auto is
    # never passed: every runtime reads the checkpoint's own format without the flag).
    quantizations: tuple[str, ...] = ("auto",)
    quantization_flag: str | None = None
    quantization_note: str = ""  # why the others are refused, for the spec's message
    # engine.speculative: the methods it honours, the section's fields it takes, the most draft tokens
    speculative_methods: tuple[str, ...] = ()
    speculative_fields: tuple[str, ...] = ("method", "num_speculative_tokens", "prompt_lookup_min",
                                           "prompt_lookup_max", "model")
    max_speculative_tokens: int | None = None
    # On CPU (resources.gpus 0): the multiple of tokens its KV blocks must be (engine.blockSize is rounded up to
    # it), and its flag for the KV cache's bytes, where without it the runtime sizes the cache from the host's
    # memory rather than the pod's (the operator passes our engine's CPU default, engine.config.DEFAULT_CPU_KV_BYTES).
    cpu_block_multiple: int = 1
    cpu_kv_bytes_flag: str | None = None


_VLLM_METRICS = MetricNames(
    running=("vllm:num_requests_running",), waiting=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in vLLM 0.10
    ttft=("vllm:time_to_first_token_seconds",), tpot=("vllm:request_time_per_output_token_seconds",),
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    finished=("vllm:request_success_total",))

RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    # Ours: /ready also turns 503 while draining after SIGTERM; /health stays 200.
    Runtime("floodway", None, _VLLM_METRICS, ready_path="/ready",
            command=("floodway", "engine"),
            quantizations=quant_formats.METHODS, quantization_flag="--quantization",
            speculative_methods=spec_config.METHODS, max_speculative_tokens=spec_config.MAX_SPECULATIVE_TOKENS),
    # vLLM answers /health only once the model is loaded and has no separate readiness endpoint; past its
    # --max-num-queued-reqs it answers 503 (so that load balancers retry elsewhere). Its CPU attention takes blocks
    # of a multiple of 32 tokens (16 fails at start), and its CPU KV cache defaults to a share of the NUMA node's
    # available memory, which a pod's memory limit does not bound.
    Runtime("vllm", "vllm/vllm-openai:v0.32.0", _VLLM_METRICS, ready_path="/health",
            tensor_parallel_flag="--tensor-parallel-size", full_status=503,
            cpu_block_multiple=32, cpu_kv_bytes_flag="--kv-cache-memory-bytes",
            quantizations=("auto", "awq", "gptq", "compressed-tensors", "fp8"), quantization_flag="--quantization",
            quantization_note="vLLM loads no GGUF file and quantizes nothing to int8/int4 at load, runtime floodway "
                              "does both; it serves a checkpoint as it ships, so a float one takes auto",
            speculative_methods=("ngram", "draft_model")),
    Runtime("sglang", "lmsysorg/sglang:v0.5.2-cu126", MetricNames(
        running=("sglang:num_running_reqs",), waiting=("sglang:num_queue_reqs",), kv_usage=("sglang:token_usage",),
        ttft=("sglang:time_to_first_token_seconds",), tpot=("sglang:time_per_output_token_seconds",),
        itl=("sglang:inter_token_latency_seconds",), finished=("sglang:num_requests_total",)),
        ready_path="/health", command=("python3", "-m", "sglang.launch_server"), tensor_parallel_flag="--tp-size",
        quantizations=("auto", "awq", "gptq", "fp8"), quantization_flag="--quantization",
        quantization_note="SGLang's other formats: engine.extraArgs"),
    # TGI exports no TTFT and no KV usage: the autoscaler sees no SLO attainment from it, only load.
    Runtime("tgi", "ghcr.io/huggingface/text-generation-inference:3.3.4", MetricNames(
        running=("tgi_batch_current_size",), waiting=("tgi_queue_size",),
        # TGI's counters carry no _total suffix; the Prometheus parser adds it to counter samples.
        tpot=("tgi_request_mean_time_per_token_duration",), finished=("tgi_request_success_total",)),
        ready_path="/health", tensor_parallel_flag="--num-shard",
        quantizations=("auto", "awq", "gptq", "fp8"), quantization_flag="--quantize",
        quantization_note="TGI serves no GGUF and quantizes nothing to int8/int4 at load",
        # --speculate k: n-gram drafts (Medusa heads instead where the model has them); no lookup bounds
        speculative_methods=("ngram",), speculative_fields=("method", "num_speculative_tokens")),
    # llama-server answers /health 503 while loading the model, 200 once it serves. It exports gauges only.
    Runtime("llamacpp", "ghcr.io/ggml-org/llama.cpp:server", MetricNames(
        running=("llamacpp:requests_processing",), waiting=("llamacpp:requests_deferred",)),
        ready_path="/health", quantizations=("auto", "gguf"),
        quantization_note="a GGUF file holds its own quantization: pick the file (Q8_0, Q4_K_M, ...)",
        # --spec-type ngram-simple: prompt lookup with one n-gram length (promptLookupMin) and k draft tokens
        speculative_methods=("ngram",), speculative_fields=("method", "num_speculative_tokens", "prompt_lookup_min")),
)}
DEFAULT = "floodway"


def runtime(name: str) -> Runtime:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r} (known: {', '.join(RUNTIMES)})") from None
