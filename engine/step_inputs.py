"""Builds one step's packed model inputs and attention metadata from the scheduled sequences."""

from dataclasses import dataclass

import torch
from floodway.engine import attention
from floodway.engine.attention import CpuRows, DecodeGroup, KernelInputs, PrefillChunk, StepMeta
from floodway.engine.kernels import cpu_attention

# A decode joins the current group unless its context is shorter than this share of the group's longest:
# bounds the padding the group's shared SDPA call computes over.
GROUP_RATIO = 0.6
MAX_DECODE_GROUPS = 4
PATHS = ("triton", "cpu", "sdpa")  # where a step's attention runs: attention_path chooses, build takes any


@dataclass
class SeqInput:
    token_ids: list[int]  # the tokens to compute this step
    start_pos: int  # tokens already in the cache
    block_table: list[int]
    samples: bool  # whether the last token's logits are needed
    num_prompt_logits: int = 0  # leading positions whose logits are kept too (prompt logprobs)
    num_spec: int = 0  # trailing draft tokens verified: a sampling seq keeps its last num_spec + 1 positions' logits
    lora_slot: int = -1  # the LoRA weight slot its rows use (-1: the base model)


def decode_groups(ctx_lens: list[int]) -> list[tuple[int, int]]:
    """(start, end) ranges over context lengths sorted longest first (pure)."""
    groups, start = [], 0
    for i in range(1, len(ctx_lens) + 1):
        if i == len(ctx_lens) or (ctx_lens[i] < GROUP_RATIO * ctx_lens[start]
                                  and len(groups) < MAX_DECODE_GROUPS - 1):
            groups.append((start, i))
            start = i
    return groups


def packed_order(seqs: list[SeqInput]) -> list[int]:
    """Indices of seqs in packed order: single-token sequences first, longest context first, then prefill chunks."""
    return sorted(range(len(seqs)), key=lambda i: (len(seqs[i].token_ids) != 1, -seqs[i].start_pos))


def build(seqs: list[SeqInput], block_size: int, k_caches, v_caches, device, path: str | None = None):
    """-> (meta, input_ids [1, T], position_ids [1, T], logits_to_keep): the sampling seqs' last num_spec + 1
    positions in seqs' order, then each seq's leading num_prompt_logits positions in seqs' order.
    The packed order puts single-token sequences first, longest context first, then prefill chunks.
    The attention metadata is for `path` (attention_path's by default): "triton", "cpu" (our CPU kernel for the
    sequences of few rows, SDPA for the others) or "sdpa"."""
    bs = block_size
    order = packed_order(seqs)
    num_decode = sum(1 for s in seqs if len(s.token_ids) == 1)
    ids, pos, slots, first, last = [], [], [], {}, {}
    for i in order:
        s = seqs[i]
        n = len(s.token_ids)
        for p in range(s.start_pos, s.start_pos + n):
            slots.append(s.block_table[p // bs] * bs + p % bs)
        first[i] = len(ids)
        pos.extend(range(s.start_pos, s.start_pos + n))
        ids.extend(s.token_ids)
        last[i] = len(ids) - 1
    dec, pre = [seqs[i] for i in order[:num_decode]], [seqs[i] for i in order[num_decode:]]
    path = path or attention_path(k_caches[0], device)
    if path not in PATHS:
        raise ValueError(f"attention path {path!r} is not one of {PATHS}")
    meta = StepMeta(k_caches, v_caches, torch.tensor(slots, device=device), [], [],
                    kernel_inputs(dec, pre, bs, device) if path == "triton" else None)
    starts = [first[i] for i in order]
    if path == "cpu":
        limit = attention.KERNEL_ROWS[k_caches[0].dtype]
        few = [j for j, i in enumerate(order) if len(seqs[i].token_ids) <= limit]
        rest = [j for j, i in enumerate(order) if len(seqs[i].token_ids) > limit]
        meta.cpu = cpu_rows([seqs[order[j]] for j in few], [starts[j] for j in few], bs)
        meta.prefills = _prefill_chunks([seqs[order[j]] for j in rest], [starts[j] for j in rest], bs, device)
    elif path == "sdpa":
        meta.decodes = _decode_groups(dec, bs, device)
        meta.prefills = _prefill_chunks(pre, starts[num_decode:], bs, device)
    keep = [last[i] - s.num_spec + j for i, s in enumerate(seqs) if s.samples for j in range(s.num_spec + 1)]
    keep += [first[i] + j for i in range(len(seqs)) for j in range(seqs[i].num_prompt_logits)]
    return (meta, torch.tensor([ids], device=device), torch.tensor([pos], device=device),
            torch.tensor(keep, dtype=torch.long, device=device))


def attention_path(cache: torch.Tensor, device) -> str:
    """The Triton kernels on CUDA where triton is installed; our CPU kernel where it is built and takes the cache's
    dtype and head size; else SDPA."""
    if torch.device(device).type == "cuda":
        return "triton" if attention.KERNELS_AVAILABLE else "sdpa"
    ours = attention.CPU_KERNEL and cache.shape[-1] <= cpu_attention.MAX_DIM and cache.dtype in attention.KERNEL_ROWS
    return "cpu" if ours else "sdpa"


def cpu_rows(seqs: list[SeqInput], starts: list[int], bs: int) -> CpuRows | None:
    """Our CPU kernel's sequences: each one's packed first row, rows and context, and its blocks (None: none)."""
    if not seqs:
        return None
    ctx = [s.start_pos + len(s.token_ids) for s in seqs]
    width = max(-(-c // bs) for c in ctx)
    tables = [s.block_table[:-(-c // bs)] + [0] * (width - -(-c // bs)) for s, c in zip(seqs, ctx, strict=True)]
    rows = [(a, len(s.token_ids), c) for s, a, c in zip(seqs, starts, ctx, strict=True)]
    return CpuRows(torch.tensor(rows, dtype=torch.int32), torch.tensor(tables, dtype=torch.int32), max(ctx),
                   all(len(s.token_ids) == 1 for s in seqs))


def _decode_groups(dec: list[SeqInput], bs: int, device) -> list[DecodeGroup]:
    """The SDPA path's decode groups: block ids and masks."""
    decodes = []
    for a, b in decode_groups([s.start_pos + 1 for s in dec]):
        width = -(-(dec[a].start_pos + 1) // bs)
        table = torch.tensor([s.block_table[:width] + [0] * (width - min(width, len(s.block_table)))
                              for s in dec[a:b]])
        ctx = torch.tensor([s.start_pos + 1 for s in dec[a:b]])
        mask = (torch.arange(width * bs)[None, :] < ctx[:, None])[:, None, None, :]
        decodes.append(DecodeGroup(a, b - a, table.reshape(-1).to(device), mask.to(device)))
    return decodes


def _prefill_chunks(pre: list[SeqInput], starts: list[int], bs: int, device) -> list[PrefillChunk]:
    """The SDPA path's prefill chunks, each at its packed first row."""
    prefills = []
    for s, start in zip(pre, starts, strict=True):
        n, ctx_len = len(s.token_ids), s.start_pos + len(s.token_ids)
        blocks = mask = None
        if s.start_pos:
            blocks = torch.tensor(s.block_table[:-(-ctx_len // bs)], device=device)
            mask = (torch.arange(ctx_len)[None, :] <= torch.arange(s.start_pos, ctx_len)[:, None]).to(device)
        prefills.append(PrefillChunk(start, n, blocks, ctx_len, mask))
    return prefills


def kernel_inputs(dec: list[SeqInput], pre: list[SeqInput], bs: int, device) -> KernelInputs:
    """The Triton kernels' block tables, context lengths and chunk offsets (CUDA), in one host-to-device copy."""
    dec_lens = [s.start_pos + 1 for s in dec]
    pre_lens = [s.start_pos + len(s.token_ids) for s in pre]
    query_start = [0]
    for s in pre:
        query_start.append(query_start[-1] + len(s.token_ids))
    dec_w, pre_w = (max((-(-c // bs) for c in lens), default=0) for lens in (dec_lens, pre_lens))
    flat = []
    for rows, lens, width in ((dec, dec_lens, dec_w), (pre, pre_lens, pre_w)):
        for s, c in zip(rows, lens, strict=True):
            need = -(-c // bs)
            flat += s.block_table[:need] + [0] * (width - need)
    flat += dec_lens + query_start + pre_lens
    parts = torch.tensor(flat, dtype=torch.int32).to(device).split(
        [len(dec) * dec_w, len(pre) * pre_w, len(dec), len(pre) + 1, len(pre)])
    return KernelInputs(len(dec), parts[0].view(len(dec), dec_w), parts[2], parts[1].view(len(pre), pre_w),
                        parts[3], parts[4])
