"""Verification of draft tokens against the target model's distributions.

Greedy rows keep the longest prefix of drafts equal to the target's argmax, then the target's own token.
Sampled rows use rejection sampling: a draft d proposed with probability q(d) is accepted with probability
min(1, p(d) / q(d)); the first rejected position samples from the normalized residual max(0, p - q); after
the last accepted draft the target samples a bonus token from p. Each emitted token is then distributed
exactly as the target's own sample. n-gram drafts are a point mass (q(d) = 1), so the test is u < p(d) and the
residual is p without d.
"""

import torch
from floodway.engine.sampler import draw


def verify(x: torch.Tensor, drafts: list[list[int]], greedy: list[bool], generators: list[torch.Generator | None],
           default_generator: torch.Generator | None = None) -> list[list[int]]:
    """x: the logits each row samples from (penalties, temperature, top-k/p applied) [R, V], laid out per sequence
    as len(drafts[s]) + 1 rows: row j is the target's next-token distribution after drafts[s][:j]. -> per sequence
    the tokens to append: its accepted drafts, then one token of the target's. Seeded sequences (generators[s])
    draw from their own stream; a sequence without drafts draws exactly what `sampler.sample` would."""
    dev = x.device
    draft_row = torch.tensor([t for d in drafts for t in (*d, -1)], device=dev)
    has_draft = draft_row >= 0
    d_idx = draft_row.clamp(min=0)
    argmax = x.argmax(dim=-1)
    row_greedy = torch.tensor([g for d, g in zip(drafts, greedy, strict=True) for _ in range(len(d) + 1)], device=dev)
    if bool(row_greedy.all()):
        accept, token = has_draft & (argmax == draft_row), argmax
    else:
        probs = torch.softmax(x, dim=-1)
        # Per row a uniform for its token (sampler.draw), then one for its draft's test; seeded rows from their stream.
        u_token = torch.rand(len(draft_row), generator=default_generator, device=dev)
        u = torch.rand(len(draft_row), generator=default_generator, device=dev)
        row = 0
        for d, g, gr in zip(drafts, generators, greedy, strict=True):
            if g is not None and not gr:
                for j in range(len(d) + 1):
                    u_token[row + j] = torch.rand(1, generator=g, device=dev)[0]
                    if j < len(d):
                        u[row + j] = torch.rand(1, generator=g, device=dev)[0]
            row += len(d) + 1
        p_draft = probs.gather(1, d_idx[:, None])[:, 0]
        residual = torch.where(has_draft[:, None], probs.scatter(1, d_idx[:, None], 0.0), probs)
        accept = has_draft & torch.where(row_greedy, argmax == draft_row, u < p_draft)
        token = torch.where(row_greedy, argmax, draw(residual, u_token))
    accept, token = accept.tolist(), token.tolist()
    out, row = [], 0
    for d in drafts:
        a = 0
        while a < len(d) and accept[row + a]:
            a += 1
        out.append([*d[:a], token[row + a]])
        row += len(d) + 1
    return out
