"""Loads a transformers causal LM and runs one packed forward per step with our paged attention: in our own decoder
where the architecture has one (engine/models/llama.py), else in transformers' modules."""

import ctypes
import logging

import torch
from floodway.engine import attention, cuda_graphs, kv_cache, packed_linear, step_inputs
from floodway.engine.config import EngineConfig
from floodway.engine.lora import manager as lora_manager
from floodway.engine.quant import linear as quant_linear
from floodway.engine.quant import load as quant_load
from floodway.engine.step_inputs import SeqInput

log = logging.getLogger("floodway.engine")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


class ModelRunner:
    def __init__(self, cfg: EngineConfig):
        from floodway.engine.models import llama
        from floodway.engine.models.builtin import resolve_model
        from transformers import AutoTokenizer, GenerationConfig

        path = resolve_model(cfg.model)
        self.device = resolve_device(cfg.device)
        self.weights = quant_load.plan(cfg.quantization, cfg.model, path)
        self.dtype = resolve_dtype(self.weights.dtype_name(cfg.dtype, self.device), self.device)
        self.weights.check(self.device, self.dtype)
        attention.register()
        model = quant_load.hf_model(self.weights, path, self.device, self.dtype, attention.ATTN_NAME)
        hf = model.config
        self.max_model_len = _max_model_len(cfg, hf)
        ours = cfg.model_impl == "auto" and llama.supports(model)
        if ours:
            decoder = llama.LlamaDecoder(model, self.max_model_len)  # takes over the weights, frees the unmerged ones
        quant_load.quantize(self.weights, model, decoder if ours else None, self.device, self.dtype)
        if ours:
            model = decoder
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # the KV budget reads free memory
        if cfg.compile_decode:  # CUDA decode steps replay CUDA graphs instead
            if ours and self.device.type == "cpu":
                model.compile_decode()
            else:
                log.warning("--compile-decode ignored: it compiles our own decoder on CPU, and this engine runs %s "
                            "on %s", "our decoder" if ours else f"transformers' {type(model).__name__}",
                            self.device.type)
        self.model = model
        if packed_linear.supported(self.device, self.dtype):
            packed_linear.pack(self.model)
        # After packing: the LoRA wrapper adds its delta to whichever linear it wraps.
        self.lora = lora_manager.attach(self.model, cfg, self.device, self.dtype) if cfg.enable_lora else None
        self.linear_kernels = quant_load.kernels(self.model)
        self.row_tile = quant_linear.row_tile(self.model)
        log.info("weights: %s; linear kernels: %s", self.weights.method,
                 ", ".join(f"{k}: {v}" for k, v in self.linear_kernels.items()))
        tokenizer = resolve_model(cfg.tokenizer) if cfg.tokenizer else path
        self.tokenizer = AutoTokenizer.from_pretrained(**quant_load.hf_source(tokenizer))
        self.vocab_size = hf.vocab_size
        self.eos_token_ids = _eos_ids(path, self.tokenizer, GenerationConfig)
        num_heads = hf.num_attention_heads
        self.shape = kv_cache.KVShape(
            num_layers=hf.num_hidden_layers,
            num_kv_heads=getattr(hf, "num_key_value_heads", None) or num_heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // num_heads,
            block_size=cfg.block_size, dtype=self.dtype)
        _return_freed_memory()
        self.num_blocks = kv_cache.num_blocks_for(cfg, self.shape, self.max_model_len, self.device)
        # The captured step calls the Triton decode kernel: without triton, CUDA steps stay eager on SDPA.
        use_graphs = self.device.type == "cuda" and not cfg.enforce_eager and attention.KERNELS_AVAILABLE
        # With graphs, one more block than the pool hands out: padded rows of a replayed step write there.
        self.k_caches, self.v_caches = kv_cache.allocate(self.shape, self.num_blocks + use_graphs, self.device)
        self.graphs = None
        if use_graphs:
            with torch.inference_mode():
                self.graphs = cuda_graphs.DecodeGraphs(
                    self.model, self.k_caches, self.v_caches, cuda_graphs.capture_sizes(cfg.max_num_seqs),
                    -(-self.max_model_len // cfg.block_size), cfg.block_size, scratch_block=self.num_blocks,
                    lora=self.lora)

    @torch.inference_mode()
    def execute(self, seqs: list[SeqInput], copies: list[tuple[int, int]] = ()) -> torch.Tensor:
        """Makes the (source, destination) block copies (copy-on-write), then runs all seqs as one forward;
        returns float32 logits [sampling seqs in the given order, V]."""
        if copies:
            src, dst = (torch.tensor(ids, device=self.device) for ids in zip(*copies, strict=True))
            for cache in (*self.k_caches, *self.v_caches):
                cache.index_copy_(0, dst, cache.index_select(0, src))
        logits = None if self.graphs is None else self.graphs.run(seqs)
        return logits if logits is not None else self.forward_eager(seqs)

    @torch.inference_mode()
    def forward_eager(self, seqs: list[SeqInput]) -> torch.Tensor:
        """The step as one eager forward (any mix of prefill and decode); logits as `execute` returns them."""
        meta, input_ids, positions, keep = step_inputs.build(seqs, self.shape.block_size, self.k_caches,
                                                                  self.v_caches, self.device)
        if self.lora is not None:
            self.lora.step.batch = lora_manager.step_batch(self.lora, seqs, step_inputs.packed_order(seqs),
                                                            self.device)
        out = self.model(input_ids=input_ids, position_ids=positions, logits_to_keep=keep, use_cache=False,
                         floodway_meta=meta)
        return out.logits[0].float()


def _max_model_len(cfg: EngineConfig, hf) -> int:
    limit = getattr(hf, "max_position_embeddings", None) or 4096
    window = getattr(hf, "sliding_window", None)
    if window and getattr(hf, "use_sliding_window", True) is not False:
        limit = min(limit, window - 1)  # within the window sliding attention equals full attention
    if cfg.max_model_len is None:
        return min(limit, 4096)
    if cfg.max_model_len > limit:
        raise ValueError(f"max_model_len {cfg.max_model_len} exceeds the model's limit of {limit} positions")
    return cfg.max_model_len


def _return_freed_memory() -> None:
    """Hands the heap's free pages back to the OS (glibc's malloc_trim). Loading frees hundreds of MB of temporaries
    (decoded codes, packing copies) in pieces glibc would otherwise keep: 274 MB of SmolLM2's Q4_1 load stayed
    resident. Elsewhere (not glibc) a no-op."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _eos_ids(path: str, tokenizer, generation_config_cls) -> set[int]:
    ids = set()
    try:
        eos = generation_config_cls.from_pretrained(path).eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    except OSError:  # no generation_config.json
        pass
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
