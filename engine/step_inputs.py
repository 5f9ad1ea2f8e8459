"""Builds one step's packed model inputs and attention metadata from the scheduled sequences."""

from dataclasses import dataclass

import torch
from floodway.engine.attention import DecodeGroup, PrefillChunk, StepMeta

# A decode joins the current group unless its context is shorter than this share of the group's longest:
# bounds the padding the group's shared SDPA call computes over.
GROUP_RATIO = 0.6
MAX_DECODE_GROUPS = 4


@dataclass
class SeqInput:
    token_ids: list[int]  # the tokens to compute this step
    start_pos: int  # tokens already in the cache
    block_table: list[int]
    samples: bool  # whether the last token's logits are needed
    num_prompt_logits: int = 0  # leading positions whose logits are kept too (prompt logprobs)


def decode_groups(ctx_lens: list[int]) -> list[tuple[int, int]]:
    """(start, end) ranges over context lengths sorted longest first (pure)."""
    groups, start = [], 0
    for i in range(1, len(ctx_lens) + 1):
        if i == len(ctx_lens) or (ctx_lens[i] < GROUP_RATIO * ctx_lens[start]
                                  and len(groups) < MAX_DECODE_GROUPS - 1):
            groups.append((start, i))
            start = i
    return groups


def build(seqs: list[SeqInput], block_size: int, k_caches, v_caches, device):
    """-> (meta, input_ids [1, T], position_ids [1, T], logits_to_keep): the sampling seqs' last positions in
    seqs' order, then each seq's leading num_prompt_logits positions in seqs' order.
    The packed order puts single-token sequences first, longest context first, then prefill chunks."""
    bs = block_size
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].token_ids) != 1, -seqs[i].start_pos))
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
    decodes = []
    dec = [seqs[i] for i in order[:num_decode]]
    for a, b in decode_groups([s.start_pos + 1 for s in dec]):
        width = -(-(dec[a].start_pos + 1) // bs)
        table = torch.tensor([s.block_table[:width] + [0] * (width - min(width, len(s.block_table)))
                              for s in dec[a:b]])
        ctx = torch.tensor([s.start_pos + 1 for s in dec[a:b]])
        mask = (torch.arange(width * bs)[None, :] < ctx[:, None])[:, None, None, :]
        decodes.append(DecodeGroup(a, b - a, table.reshape(-1).to(device), mask.to(device)))
    prefills, start = [], num_decode
    for i in order[num_decode:]:
        s = seqs[i]
        n, ctx_len = len(s.token_ids), s.start_pos + len(s.token_ids)
        blocks = mask = None
        if s.start_pos:
            blocks = torch.tensor(s.block_table[:-(-ctx_len // bs)], device=device)
            mask = (torch.arange(ctx_len)[None, :] <= torch.arange(s.start_pos, ctx_len)[:, None]).to(device)
        prefills.append(PrefillChunk(start, n, blocks, ctx_len, mask))
        start += n
    meta = StepMeta(k_caches, v_caches, torch.tensor(slots, device=device), decodes, prefills)
    keep = [last[i] for i in range(len(seqs)) if seqs[i].samples]
    keep += [first[i] + j for i in range(len(seqs)) for j in range(seqs[i].num_prompt_logits)]
    return (meta, torch.tensor([ids], device=device), torch.tensor([pos], device=device),
            torch.tensor(keep, dtype=torch.long, device=device))
