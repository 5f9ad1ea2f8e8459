"""Engine configuration (torch-free): one dataclass, validated field by field."""

from dataclasses import dataclass, field

from floodway.engine.lora import config as lora_config
from floodway.engine.quant import formats as quant_formats
from floodway.engine.scheduling_policy import FCFS, POLICIES
from floodway.engine.spec_decode import config as spec_config

DEFAULT_CPU_KV_BYTES = 512 * 2**20


def _setting(default, help: str):
    # The help is the `floodway engine` flag's (engine/server/cli.py derives one flag per field).
    return field(default=default, metadata={"help": help})


@dataclass
class EngineConfig:
    model: str = _setting("floodway/tiny-llama", "Hugging Face id, local folder or built-in name.")
    tokenizer: str | None = _setting(None, "Tokenizer id or folder (default: the model's).")
    served_model_name: str | None = _setting(None, "Model name in the API (default: --model).")
    dtype: str = _setting("auto", "auto (float32 on CPU, bfloat16 on CUDA), float32, float16 or bfloat16.")
    quantization: str = _setting("auto", "Weights: auto (the checkpoint's own: a .gguf file's types, the built-in "
                                         "SmolLM2's shipped Q4_1, a quantization_config's method), none (float), "
                                         "gguf, awq, gptq, compressed-tensors or fp8 (such a checkpoint as it ships; "
                                         "fp8 also quantizes a float one at load), int8 or int4 (weight-only, "
                                         "round-to-nearest in groups of 32 at load of a float checkpoint). Quantized "
                                         "weights compute in bfloat16 on CPU (dtype auto picks it); fp8 runs on CUDA "
                                         "only.")
    device: str = _setting("auto", "auto, cpu or cuda[:N].")
    max_model_len: int | None = _setting(None, "Context length (default: min(model's, 4096)).")
    max_num_seqs: int = _setting(64, "Most sequences in one batch.")
    max_num_batched_tokens: int = _setting(2048, "Token budget of one engine step.")
    block_size: int = _setting(16, "Tokens per KV-cache block.")
    gpu_memory_utilization: float = _setting(0.9, "Share of GPU memory for weights + KV cache.")
    kv_cache_bytes: int | None = _setting(None, "KV-cache budget in bytes on CPU.")
    num_kv_blocks: int | None = _setting(None, "Exact number of KV blocks (overrides the budgets; tests force "
                                               "preemption with it).")
    enable_prefix_caching: bool = _setting(True, "Reuse KV blocks of shared prompt prefixes.")
    enable_chunked_prefill: bool = _setting(True, "Split long prompts across engine steps.")
    scheduling_policy: str = _setting(FCFS, "fcfs (first come, first served) or priority: by each request's "
                                            "`priority` (lower first, ties by arrival); prompts being prefilled "
                                            "yield to higher-priority arrivals, a request with no seat or KV "
                                            "blocks preempts lower-priority running ones, and the lowest-priority "
                                            "running requests are preempted first.")
    enforce_eager: bool = _setting(False, "On CUDA, run every step eagerly instead of replaying decode steps as "
                                          "CUDA graphs captured at startup.")
    compile_decode: bool = _setting(False, "On CPU, run the layers of decode-only steps as one torch.compile graph "
                                           "(our decoder; needs a C++ compiler): compiled on the first decode step "
                                           "of batch 1 and of larger batches, ~10-25 s of CPU each.")
    model_impl: str = _setting("auto", "auto (our own decoder for Llama, Mistral and Qwen2, transformers' modules "
                                       "otherwise) or transformers (always transformers' modules).")
    seed: int = _setting(0, "Seed of the engine's sampler.")
    speculative_config: str | None = _setting(
        None, 'Speculative decoding, as vLLM\'s JSON: {"method": "ngram", "num_speculative_tokens": k, '
              '"prompt_lookup_min": n, "prompt_lookup_max": m} (prompt lookup, n and m by default '
              f'{spec_config.SpeculativeConfig.prompt_lookup_min} and {spec_config.SpeculativeConfig.prompt_lookup_max}'
              '); each step verifies up to k drafts per sequence where measured acceptance and step times say it pays.')
    enable_lora: bool = _setting(False, "Serve LoRA adapters (PEFT format, on q/k/v/o and gate/up/down) next to the "
                                        "base model: a request names one in `model`.")
    lora_modules: list[str] | None = _setting(None, "Adapters served from startup, as name=path (repeat the flag).")
    max_loras: int = _setting(1, "Adapters resident at once (requests for more wait); rank-padded weight slots.")
    max_lora_rank: int = _setting(16, "Largest adapter rank served (the slots are padded to it).")
    max_cpu_loras: int | None = _setting(None, "Adapters whose weights stay in CPU memory, least recently used "
                                               "evicted first (default: --max-loras).")
    # Slept in the serving engine loop's thread, so tests make capacity scarce by configuration instead of
    # racing the CPU.
    step_delay_ms: int = _setting(0, "Testing/demo knob: each engine step takes at least this many ms more "
                                     "(slept in the engine thread), making capacity scarce.")
    # Sized from the engine's measured step times (engine/prefill_budget.py).
    tpot_slo_ms: float = _setting(0.0, "TPOT protection: while sequences decode, each step carries only the "
                                       "prefill tokens that keep it within this many ms (0: off).")

    def validate(self) -> None:
        """Raises ValueError naming the offending field."""
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty string")
        if self.dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be one of auto, float32, float16, bfloat16, got {self.dtype!r}")
        if self.quantization not in quant_formats.METHODS:
            raise ValueError(f"quantization must be one of {', '.join(quant_formats.METHODS)}, "
                             f"got {self.quantization!r}")
        if self.model_impl not in ("auto", "transformers"):
            raise ValueError(f"model_impl must be auto or transformers, got {self.model_impl!r}")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {', '.join(POLICIES)}, got {self.scheduling_policy!r}")
        if not isinstance(self.device, str) or not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            _positive_int(name, getattr(self, name))
        for name in ("max_model_len", "kv_cache_bytes", "num_kv_blocks"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if not isinstance(self.gpu_memory_utilization, (int, float)) or not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if not self.enable_chunked_prefill and self.max_model_len is not None \
                and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("max_num_batched_tokens must be >= max_model_len when enable_chunked_prefill is off")
        if isinstance(self.step_delay_ms, bool) or not isinstance(self.step_delay_ms, int) or self.step_delay_ms < 0:
            raise ValueError(f"step_delay_ms must be an integer >= 0, got {self.step_delay_ms!r}")
        if isinstance(self.tpot_slo_ms, bool) or not isinstance(self.tpot_slo_ms, (int, float)) \
                or not 0 <= self.tpot_slo_ms < float("inf"):
            raise ValueError(f"tpot_slo_ms must be a number >= 0, got {self.tpot_slo_ms!r}")
        if self.tpot_slo_ms and not self.enable_chunked_prefill:
            raise ValueError("tpot_slo_ms needs enable_chunked_prefill (prompts are split across steps)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.speculative_config is not None and not isinstance(self.speculative_config, str):
            raise ValueError(f"speculative_config must be a JSON string, got {self.speculative_config!r:.80}")
        spec_config.parse(self.speculative_config)
        lora_config.check(self)


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
