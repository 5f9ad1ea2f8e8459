"""Loads a transformers causal LM with our paged attention and runs one packed forward per step."""

from dataclasses import dataclass

import torch
from floodway.engine import attention, kv_cache
from floodway.engine.config import EngineConfig


@dataclass
class SeqInput:
    token_ids: list[int]  # the tokens to compute this step
    start_pos: int  # tokens already in the cache
    block_table: list[int]
    samples: bool  # whether the last token's logits are needed


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
        from floodway.engine.models.builtin import resolve_model
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        path = resolve_model(cfg.model)
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        if self.device.type == "cpu":
            torch.set_num_threads(max(torch.get_num_threads(), _cpu_count()))
        attention.register()
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype,
                                                          attn_implementation=attention.ATTN_NAME)
        self.model.to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.tokenizer) if cfg.tokenizer else path)
        hf = self.model.config
        self.vocab_size = hf.vocab_size
        self.max_model_len = _max_model_len(cfg, hf)
        self.eos_token_ids = _eos_ids(path, self.tokenizer, GenerationConfig)
        num_heads = hf.num_attention_heads
        self.shape = kv_cache.KVShape(
            num_layers=hf.num_hidden_layers,
            num_kv_heads=getattr(hf, "num_key_value_heads", None) or num_heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // num_heads,
            block_size=cfg.block_size, dtype=self.dtype)
        self.num_blocks = kv_cache.num_blocks_for(cfg, self.shape, self.max_model_len, self.device)
        self.k_caches, self.v_caches = kv_cache.allocate(self.shape, self.num_blocks, self.device)

    @torch.inference_mode()
    def execute(self, seqs: list[SeqInput]) -> torch.Tensor:
        """Runs all seqs (single-token ones first) as one forward; returns float32 logits [num sampling seqs, V]."""
        meta, input_ids, positions, keep = self._prepare(seqs)
        out = self.model(input_ids=input_ids, position_ids=positions, logits_to_keep=keep, use_cache=False,
                         floodway_meta=meta)
        return out.logits[0].float()

    def _prepare(self, seqs: list[SeqInput]):
        bs, dev = self.shape.block_size, self.device
        ids, pos, slots, keep = [], [], [], []
        for s in seqs:
            for p in range(s.start_pos, s.start_pos + len(s.token_ids)):
                slots.append(s.block_table[p // bs] * bs + p % bs)
            pos.extend(range(s.start_pos, s.start_pos + len(s.token_ids)))
            ids.extend(s.token_ids)
            if s.samples:
                keep.append(len(ids) - 1)
        decodes = [s for s in seqs if len(s.token_ids) == 1]
        d = len(decodes)
        decode_slots = decode_mask = None
        if d:
            ctx = torch.tensor([s.start_pos + 1 for s in decodes])
            width = max(len(s.block_table) for s in decodes)
            table = torch.tensor([s.block_table + [0] * (width - len(s.block_table)) for s in decodes])
            lmax = int(ctx.max())
            decode_slots = (table[:, :, None] * bs + torch.arange(bs)).reshape(d, -1)[:, :lmax]
            decode_mask = (torch.arange(lmax)[None, :] < ctx[:, None])[:, None, None, :]
            decode_slots, decode_mask = decode_slots.to(dev), decode_mask.to(dev)
        prefills, start = [], d
        for s in seqs[d:]:
            n = len(s.token_ids)
            ctx_slots = mask = None
            if s.start_pos:
                ctx_len = s.start_pos + n
                table = torch.tensor(s.block_table)
                ctx_slots = (table[:, None] * bs + torch.arange(bs)).reshape(-1)[:ctx_len].to(dev)
                mask = (torch.arange(ctx_len)[None, :] <= torch.arange(s.start_pos, ctx_len)[:, None]).to(dev)
            prefills.append(attention.PrefillChunk(start, n, ctx_slots, mask))
            start += n
        meta = attention.StepMeta(self.k_caches, self.v_caches, torch.tensor(slots, device=dev), d,
                                  decode_slots, decode_mask, prefills)
        return (meta, torch.tensor([ids], device=dev), torch.tensor([pos], device=dev),
                torch.tensor(keep, dtype=torch.long, device=dev))


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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
