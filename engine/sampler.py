"""Batched sampling: logit_bias, min_tokens, repetition/frequency/presence penalties, then greedy, temperature,
top-k, top-p with per-request seeded generators; logprobs (chosen token and top-N) of the raw distribution."""

from dataclasses import dataclass

import torch
from floodway.engine.sampling_params import SamplingParams

# OpenAI's stand-in for "very unlikely": keeps a masked (-inf) alternative JSON-encodable.
MIN_LOGPROB = -9999.0


@dataclass
class SamplerOutput:
    tokens: list[int]
    logprobs: list[float] | None  # the chosen token's, per row; None when no row asks
    top_logprobs: list[dict[int, float] | None] | None  # per row: its N most likely tokens, when N > 0


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
           default_generator: torch.Generator | None = None, prompt_ids: list[list[int]] | None = None,
           output_ids: list[list[int]] | None = None, eos_token_ids=()) -> SamplerOutput:
    """logits [B, V] float32 -> one token per row. prompt_ids/output_ids (per row) feed the penalties and
    min_tokens; they are read only when a row asks for those."""
    x = processed_logits(logits, params, prompt_ids, output_ids, eos_token_ids)
    greedy = torch.tensor([p.greedy for p in params], device=logits.device)
    argmax = x.argmax(dim=-1)
    if bool(greedy.all()):
        tokens = argmax
    else:
        # One uniform per row; each seeded row draws its own from its stream.
        u = torch.rand(len(params), generator=default_generator, device=logits.device)
        for i, g in enumerate(generators):
            if g is not None and not params[i].greedy:
                u[i] = torch.rand(1, generator=g, device=logits.device)[0]
        tokens = torch.where(greedy, argmax, draw(torch.softmax(x, dim=-1), u))
    if all(p.logprobs is None for p in params):
        return SamplerOutput(tokens.tolist(), None, None)
    chosen, top = token_logprobs(logits, tokens, [p.logprobs or 0 for p in params])
    return SamplerOutput(tokens.tolist(), chosen, top)


def draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One index per row of nonnegative `weights` [R, V], i with probability weights[r, i] / the row's sum: the
    inverse of the row's cumulative sum at u[r] x that sum, u uniform in [0, 1). In float64 the product is exact and
    below the sum, so a zero weight is never drawn. On CPU 26x faster than an exponential race, argmax(p / E) with E
    ~ Exp(1), whose noise torch draws at ~15 ns an element: 0.28 against 7.3 ms for 8 rows of SmolLM2's 49,152.
    A row of zeros (nothing to draw) gives the last index."""
    cdf = weights.to(torch.float64).cumsum_(-1)
    pick = torch.searchsorted(cdf, (u.to(torch.float64) * cdf[:, -1])[:, None], right=True)[:, 0]
    return pick.clamp_(max=weights.shape[-1] - 1)


def processed_logits(logits: torch.Tensor, params: list[SamplingParams], prompt_ids: list[list[int]] | None = None,
                     output_ids: list[list[int]] | None = None, eos_token_ids=()) -> torch.Tensor:
    """The logits each row samples from: penalties, then (unless every row is greedy) temperature, top-k, top-p.
    A greedy row's argmax is its token."""
    x = logits
    if any(p.penalized for p in params):
        x = apply_penalties(logits, params, prompt_ids, output_ids, eos_token_ids)
    if all(p.greedy for p in params):
        return x
    x = x / torch.tensor([p.temperature if not p.greedy else 1.0 for p in params], device=logits.device)[:, None]
    x = _top_k(x, [p.top_k if p.top_k > 0 else 0 for p in params])
    return _top_p(x, [p.top_p for p in params])


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, num_top: list[int]):
    """Raw log-softmax of each row at its token, and its num_top[row] most likely tokens (None where 0).
    -> (list[float], list[dict[int, float] | None] | None when every num_top is 0)."""
    lp = torch.log_softmax(logits, dim=-1).clamp_(min=MIN_LOGPROB)
    chosen = lp.gather(1, token_ids[:, None].to(lp.device))[:, 0].tolist()
    k = max(num_top)
    if k == 0:
        return chosen, None
    vals, idx = lp.topk(k, dim=-1)
    vals, idx = vals.tolist(), idx.tolist()
    top = [dict(zip(idx[i][:n], vals[i][:n], strict=True)) if n else None for i, n in enumerate(num_top)]
    return chosen, top


def apply_penalties(logits: torch.Tensor, params: list[SamplingParams], prompt_ids: list[list[int]],
                    output_ids: list[list[int]], eos_token_ids=()) -> torch.Tensor:
    """New logits with, in vLLM's order: logit_bias added; EOS and stop ids masked while a row has fewer than
    min_tokens outputs; repetition penalty over prompt + output tokens (transformers' rule); frequency and
    presence penalties over output tokens (OpenAI's formula)."""
    x = logits.clone()
    dev = x.device
    bias = [(i, t, b) for i, p in enumerate(params) for t, b in p.logit_bias.items()]
    if bias:
        rows, toks, vals = zip(*bias, strict=True)
        x.index_put_((torch.tensor(rows, device=dev), torch.tensor(toks, device=dev)),
                     torch.tensor(vals, dtype=x.dtype, device=dev), accumulate=True)
    banned = [(i, t) for i, p in enumerate(params) if len(output_ids[i]) < p.min_tokens
              for t in {*p.stop_token_ids, *(() if p.ignore_eos else eos_token_ids)}]
    if banned:
        rows, toks = zip(*banned, strict=True)
        x[torch.tensor(rows, device=dev), torch.tensor(toks, device=dev)] = float("-inf")
    if any(p.repetition_penalty != 1.0 for p in params):
        seen = _counts([p + o for p, o in zip(prompt_ids, output_ids, strict=True)], x.shape[1], dev) > 0
        r = torch.tensor([p.repetition_penalty for p in params], dtype=x.dtype, device=dev)[:, None]
        x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    if any(p.frequency_penalty or p.presence_penalty for p in params):
        counts = _counts(output_ids, x.shape[1], dev).to(x.dtype)
        freq = torch.tensor([p.frequency_penalty for p in params], dtype=x.dtype, device=dev)[:, None]
        pres = torch.tensor([p.presence_penalty for p in params], dtype=x.dtype, device=dev)[:, None]
        x = x - freq * counts - pres * (counts > 0).to(x.dtype)
    return x


def _counts(id_lists: list[list[int]], vocab: int, device) -> torch.Tensor:
    """[B, vocab] occurrences of each token id per row (rows padded with an extra column that is dropped)."""
    width = max((len(ids) for ids in id_lists), default=0)
    idx = torch.full((len(id_lists), width), vocab, dtype=torch.long)
    for i, ids in enumerate(id_lists):
        idx[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    counts = torch.zeros(len(id_lists), vocab + 1, dtype=torch.int32)
    counts.scatter_add_(1, idx, torch.ones_like(idx, dtype=torch.int32))
    return counts[:, :vocab].to(device)


def _top_k(x: torch.Tensor, ks: list[int]) -> torch.Tensor:
    kmax = max(ks)
    if kmax == 0:
        return x
    vals = x.topk(min(kmax, x.shape[-1]), dim=-1).values
    idx = torch.tensor([min(k, x.shape[-1]) - 1 if k else 0 for k in ks], device=x.device)
    threshold = vals.gather(1, idx[:, None])
    active = torch.tensor([k > 0 for k in ks], device=x.device)[:, None]
    return x.masked_fill(active & (x < threshold), float("-inf"))


def _top_p(x: torch.Tensor, ps: list[float]) -> torch.Tensor:
    if all(p >= 1.0 for p in ps):
        return x
    sorted_x, order = x.sort(dim=-1, descending=True)
    probs = torch.softmax(sorted_x, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of strictly more likely tokens
    drop = before > torch.tensor(ps, device=x.device)[:, None]  # keeps at least the top token
    return x.scatter(1, order, sorted_x.masked_fill(drop, float("-inf")))
