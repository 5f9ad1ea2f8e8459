"""What differs between the serving engines an InferenceService can run, in one table: the command line each
takes for the spec's settings, its readiness and liveness paths, how it shards a model over GPUs, its image,
and its names for the load and latency metrics the gateway and the autoscaler read.

Our names are vLLM's (our engine exports them too); every other runtime maps its own onto them. Torch-free:
the gateway, the operator and the autoscaler all import it. Every runtime takes the spec's port by flag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from floodway.operator.spec import InferenceServiceSpec


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


ArgsFn = Callable[["InferenceServiceSpec", str, int], list[str]]


@dataclass(frozen=True)
class Runtime:
    name: str
    image: str | None  # the upstream image users run (None: the operator's own); engine.image overrides it
    args: ArgsFn  # (spec, host, port) -> the container's arguments, before tensor parallelism and extraArgs
    metrics: MetricNames
    ready_path: str  # 200 only while it should receive traffic
    health_path: str = "/health"  # 200 while the process is alive (liveness, startup)
    command: tuple[str, ...] = ()  # empty: the image's entrypoint
    tensor_parallel_flag: str | None = None  # shards the model over the pod's GPUs; None: one GPU at most


def _vllm_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # vLLM's flags; our engine takes the same names.
    e = spec.engine
    return ["--model", spec.model_source, "--served-model-name", spec.model_name, "--host", host, "--port", str(port),
            "--dtype", e.dtype, "--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs),
            "--max-num-batched-tokens", str(e.max_num_batched_tokens), "--block-size", str(e.block_size),
            "--gpu-memory-utilization", str(e.gpu_memory_utilization),
            "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"]


def _floodway_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # Finish in-flight requests after SIGTERM, a few seconds inside the pod's grace period.
    drain = max(spec.engine.termination_grace_period_seconds - 5, 1)
    # TPOT protection: the engine budgets each step's prefill so decoding requests keep the spec's TPOT.
    return _vllm_args(spec, host, port) + ["--drain-timeout", str(drain), "--tpot-slo-ms", f"{spec.slo.tpot_ms:g}"]


def _sglang_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    e = spec.engine
    args = ["--model-path", spec.model_source, "--served-model-name", spec.model_name, "--host", host,
            "--port", str(port),
            "--dtype", e.dtype, "--context-length", str(e.max_model_len),
            "--max-running-requests", str(e.max_num_seqs), "--chunked-prefill-size", str(e.max_num_batched_tokens),
            "--page-size", str(e.block_size), "--mem-fraction-static", str(e.gpu_memory_utilization),
            "--enable-metrics"]
    return args + ([] if e.enable_prefix_caching else ["--disable-radix-cache"])


def _tgi_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # TGI picks its own KV block size and caches prefixes unless PREFIX_CACHING=0 is in engine.env; it takes
    # no float32 and chooses by itself on auto.
    e = spec.engine
    args = ["--model-id", spec.model_source, "--served-model-name", spec.model_name, "--hostname", host,
            "--port", str(port),
            "--max-input-tokens", str(max(e.max_model_len - 1, 1)), "--max-total-tokens", str(e.max_model_len),
            "--max-batch-size", str(e.max_num_seqs), "--max-batch-prefill-tokens", str(e.max_num_batched_tokens),
            "--cuda-memory-fraction", str(e.gpu_memory_utilization)]
    return args + (["--dtype", e.dtype] if e.dtype in ("float16", "bfloat16") else [])


def _llamacpp_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # spec.model is a GGUF file. llama-server splits --ctx-size evenly over its --parallel slots, so each slot
    # (one sequence) gets max_model_len. GGUF files fix their own precision: dtype does not apply.
    e = spec.engine
    args = ["--model", spec.model_source, "--alias", spec.model_name, "--host", host, "--port", str(port),
            "--parallel", str(e.max_num_seqs), "--ctx-size", str(e.max_model_len * e.max_num_seqs),
            "--batch-size", str(e.max_num_batched_tokens), "--metrics"]
    if spec.resources.gpus:
        args += ["--n-gpu-layers", "999"]  # every layer on the GPU
    return args + ([] if e.enable_prefix_caching else ["--no-cache-prompt"])


_VLLM_METRICS = MetricNames(
    running=("vllm:num_requests_running",), waiting=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in vLLM 0.10
    ttft=("vllm:time_to_first_token_seconds",), tpot=("vllm:request_time_per_output_token_seconds",),
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    finished=("vllm:request_success_total",))

RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    # Ours: /ready also turns 503 while draining after SIGTERM; /health stays 200.
    Runtime("floodway", None, _floodway_args, _VLLM_METRICS, ready_path="/ready",
            command=("floodway", "engine")),
    # vLLM answers /health only once the model is loaded and has no separate readiness endpoint.
    Runtime("vllm", "vllm/vllm-openai:v0.10.2", _vllm_args, _VLLM_METRICS, ready_path="/health",
            tensor_parallel_flag="--tensor-parallel-size"),
    Runtime("sglang", "lmsysorg/sglang:v0.5.2-cu126", _sglang_args, MetricNames(
        running=("sglang:num_running_reqs",), waiting=("sglang:num_queue_reqs",), kv_usage=("sglang:token_usage",),
        ttft=("sglang:time_to_first_token_seconds",), tpot=("sglang:time_per_output_token_seconds",),
        itl=("sglang:inter_token_latency_seconds",), finished=("sglang:num_requests_total",)),
        ready_path="/health", command=("python3", "-m", "sglang.launch_server"), tensor_parallel_flag="--tp-size"),
    # TGI exports no TTFT and no KV usage: the autoscaler sees no SLO attainment from it, only load.
    Runtime("tgi", "ghcr.io/huggingface/text-generation-inference:3.3.4", _tgi_args, MetricNames(
        running=("tgi_batch_current_size",), waiting=("tgi_queue_size",),
        # TGI's counters carry no _total suffix; the Prometheus parser adds it to counter samples.
        tpot=("tgi_request_mean_time_per_token_duration",), finished=("tgi_request_success_total",)),
        ready_path="/health", tensor_parallel_flag="--num-shard"),
    # llama-server answers /health 503 while loading the model, 200 once it serves. It exports gauges only.
    Runtime("llamacpp", "ghcr.io/ggml-org/llama.cpp:server", _llamacpp_args, MetricNames(
        running=("llamacpp:requests_processing",), waiting=("llamacpp:requests_deferred",)),
        ready_path="/health"),
)}
DEFAULT = "floodway"


def runtime(name: str) -> Runtime:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r} (known: {', '.join(RUNTIMES)})") from None
