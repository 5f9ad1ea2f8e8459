"""Batched sampling: greedy, temperature, top-k, top-p, per-request seeded generators, chosen-token logprobs."""

import torch
from floodway.engine.sampling_params import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
           default_generator: torch.Generator | None = None) -> tuple[list[int], list[float] | None]:
    """logits [B, V] float32 -> (token per row, logprob of each chosen token or None when no row asks)."""
    greedy = torch.tensor([p.greedy for p in params], device=logits.device)
    argmax = logits.argmax(dim=-1)
    if bool(greedy.all()):
        tokens = argmax
    else:
        x = logits / torch.tensor([p.temperature if not p.greedy else 1.0 for p in params],
                                  device=logits.device)[:, None]
        x = _top_k(x, [p.top_k if p.top_k > 0 else 0 for p in params])
        x = _top_p(x, [p.top_p for p in params])
        probs = torch.softmax(x, dim=-1)
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p; each seeded row uses its own stream.
        noise = torch.empty_like(probs).exponential_(generator=default_generator)
        for i, g in enumerate(generators):
            if g is not None and not params[i].greedy:
                noise[i].exponential_(generator=g)
        tokens = torch.where(greedy, argmax, (probs / noise).argmax(dim=-1))
    logprobs = None
    if any(p.logprobs for p in params):
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0].tolist()
    return tokens.tolist(), logprobs


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
