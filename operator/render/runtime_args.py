"""Each runtime's command line for the spec's settings (the runtime table itself: operator/runtimes.py)."""

import json
from collections.abc import Callable

from floodway.engine.config import DEFAULT_CPU_KV_BYTES
from floodway.engine.spec_decode import config as spec_config
from floodway.operator.runtimes import runtime
from floodway.operator.spec import InferenceServiceSpec


def _quantization(spec: InferenceServiceSpec) -> list[str]:
    # auto is each runtime's behaviour without the flag; the spec refuses the values a runtime does not take.
    flag, q = runtime(spec.engine.runtime).quantization_flag, spec.engine.quantization
    return [flag, q] if flag and q != "auto" else []


def _speculative_config(spec: InferenceServiceSpec) -> list[str]:
    # vLLM's JSON keys are the section's field names in snake_case.
    s = spec.engine.speculative
    return [] if s is None else ["--speculative-config", json.dumps(s.model_dump(exclude_none=True))]


def _scheduling_policy(spec: InferenceServiceSpec) -> list[str]:
    # fcfs is both runtimes' behaviour without the flag; the spec refuses priority for the others.
    p = spec.engine.scheduling_policy
    return [] if p == "fcfs" else ["--scheduling-policy", p]


def block_size(spec: InferenceServiceSpec) -> int:
    """engine.blockSize as the runtime takes it: on CPU rounded up to the multiple its attention needs."""
    multiple = runtime(spec.engine.runtime).cpu_block_multiple if spec.resources.gpus == 0 else 1
    return -(-spec.engine.block_size // multiple) * multiple


def _cpu_kv_bytes(spec: InferenceServiceSpec) -> list[str]:
    flag = runtime(spec.engine.runtime).cpu_kv_bytes_flag
    return [flag, str(DEFAULT_CPU_KV_BYTES)] if flag and spec.resources.gpus == 0 else []


def _vllm_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # vLLM's flags; our engine takes the same names.
    e = spec.engine
    return ["--model", spec.model_source, "--served-model-name", spec.model_name, "--host", host, "--port", str(port),
            "--dtype", e.dtype, "--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs),
            "--max-num-batched-tokens", str(e.max_num_batched_tokens), "--block-size", str(block_size(spec)),
            "--gpu-memory-utilization", str(e.gpu_memory_utilization),
            "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching",
            *_quantization(spec), *_speculative_config(spec), *_scheduling_policy(spec)]


def max_loras(spec: InferenceServiceSpec) -> int:
    """Adapters each engine holds resident at once: every one of the spec's (the gateway's config says the same)."""
    return len(spec.adapters)


def _lora(spec: InferenceServiceSpec, repeat_flag: bool) -> list[str]:
    # Our engine repeats --lora-modules, vLLM takes one flag with every item.
    if not spec.adapters:
        return []
    items = [f"{name}={path}" for name, path in spec.adapter_sources()]
    modules = [a for item in items for a in ("--lora-modules", item)] if repeat_flag else ["--lora-modules", *items]
    return ["--enable-lora", "--max-loras", str(max_loras(spec)), *modules]


def _drain_s(spec: InferenceServiceSpec) -> int:
    # Finish in-flight requests after SIGTERM, a few seconds inside the pod's grace period.
    return max(spec.engine.termination_grace_period_seconds - 5, 1)


def _vllm_only_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # vLLM aborts every request in flight on SIGTERM unless given a shutdown timeout (its default, 0, aborts).
    return _vllm_args(spec, host, port) + ["--shutdown-timeout", str(_drain_s(spec))] + _cpu_kv_bytes(spec) + \
        _lora(spec, False)


def _floodway_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # TPOT protection: the engine budgets each step's prefill so decoding requests keep the spec's TPOT.
    return _vllm_args(spec, host, port) + ["--drain-timeout", str(_drain_s(spec)),
                                           "--tpot-slo-ms", f"{spec.slo.tpot_ms:g}"] + _lora(spec, True)


def _sglang_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    e = spec.engine
    args = ["--model-path", spec.model_source, "--served-model-name", spec.model_name, "--host", host,
            "--port", str(port),
            "--dtype", e.dtype, "--context-length", str(e.max_model_len),
            "--max-running-requests", str(e.max_num_seqs), "--chunked-prefill-size", str(e.max_num_batched_tokens),
            "--page-size", str(e.block_size), "--mem-fraction-static", str(e.gpu_memory_utilization),
            "--enable-metrics", *_quantization(spec)]
    return args + ([] if e.enable_prefix_caching else ["--disable-radix-cache"])


def _tgi_args(spec: InferenceServiceSpec, host: str, port: int) -> list[str]:
    # TGI picks its own KV block size and caches prefixes unless PREFIX_CACHING=0 is in engine.env; it takes
    # no float32 and chooses by itself on auto.
    e = spec.engine
    args = ["--model-id", spec.model_source, "--served-model-name", spec.model_name, "--hostname", host,
            "--port", str(port),
            "--max-input-tokens", str(max(e.max_model_len - 1, 1)), "--max-total-tokens", str(e.max_model_len),
            "--max-batch-size", str(e.max_num_seqs), "--max-batch-prefill-tokens", str(e.max_num_batched_tokens),
            "--cuda-memory-fraction", str(e.gpu_memory_utilization), *_quantization(spec)]
    if e.speculative is not None:  # TGI's n-gram speculation (the spec refuses its other settings)
        args += ["--speculate", str(e.speculative.num_speculative_tokens)]
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
    if e.speculative is not None:  # its prompt lookup matches one n-gram length: ours' shortest
        n = e.speculative.prompt_lookup_min or spec_config.SpeculativeConfig.prompt_lookup_min
        args += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(n),
                 "--spec-ngram-simple-size-m", str(e.speculative.num_speculative_tokens)]
    return args + ([] if e.enable_prefix_caching else ["--no-cache-prompt"])


# runtime name -> (spec, host, port) -> the container's arguments, before tensor parallelism and extraArgs
RUNTIME_ARGS: dict[str, Callable[[InferenceServiceSpec, str, int], list[str]]] = {
    "floodway": _floodway_args, "vllm": _vllm_only_args, "sglang": _sglang_args, "tgi": _tgi_args,
    "llamacpp": _llamacpp_args}
