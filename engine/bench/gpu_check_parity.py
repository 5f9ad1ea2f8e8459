"""Greedy parity of the GPU check, and what counts as a failure.

Each prompt is decoded greedily three times: by our engine in the run dtype (bfloat16 on a GPU), by transformers
`generate` in the run dtype, and by transformers in float32, the reference. Random-weight models have near ties among
their next-token logits, and two bf16 forwards round differently (our packed paged step against generate's, another
kernel's reduction order), so a bf16 run leaving the float32 one at some position is expected: transformers' own
bf16 run does. A divergence fails only where rounding cannot explain it: at the first position where ours leaves
the float32 tokens, the float32 logits prefer their token over ours by more than TOLERANCE times the rounding
scale, the largest logit error of a run-dtype transformers forward over the same prefix (teacher-forced) against
the reference's logits there. Two logits each off by at most e swap only within 2e; TOLERANCE = 4 lets our forward
round up to twice as coarsely as transformers' own. A wrong attention, mask, position or cache read moves logits by
the order of their spread, far above that.
"""

from dataclasses import dataclass

import torch

TOLERANCE = 4.0


@dataclass
class ParityRow:
    prompt_len: int
    ours_vs_run: int  # first position where ours differs from transformers in the run dtype (= tokens if none)
    run_vs_ref: int  # the same for transformers' run dtype against float32: the divergence rounding alone causes
    ours_vs_ref: int
    margin: float = 0.0  # float32 logit of the reference's token minus ours, at ours_vs_ref
    tolerance: float = 0.0

    @property
    def ok(self) -> bool:
        return self.margin <= self.tolerance


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first differing token, or the common length when one is a prefix of the other (pure)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def judge(ref_logits: torch.Tensor, run_logits: torch.Tensor, ref_token: int, our_token: int) -> tuple[float, float]:
    """(margin, tolerance) at a divergence (pure): how much the float32 logits prefer the reference's token over
    ours, and TOLERANCE times the largest error of the run-dtype logits against them."""
    margin = float(ref_logits[ref_token] - ref_logits[our_token])
    return margin, TOLERANCE * float((run_logits.float() - ref_logits).abs().max())


@torch.inference_mode()
def hf_greedy(model, prompt: list[int], k: int, logits: bool = False) -> tuple[list[int], torch.Tensor | None]:
    """transformers greedy `generate` of one prompt (no padding), EOS not stopping it (ours runs with ignore_eos);
    -> (k tokens, [k, V] float32 logits on the CPU when asked)."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k, do_sample=False,
                         eos_token_id=None, pad_token_id=0, output_logits=logits, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    if len(tokens) != k:
        raise RuntimeError(f"transformers generated {len(tokens)} tokens, not {k}: EOS stopped it")
    return tokens, torch.stack(out.logits)[:, 0].float().cpu() if logits else None


@torch.inference_mode()
def last_logits(model, ids: list[int]) -> torch.Tensor:
    """Next-token logits after `ids`, one full forward (teacher-forced), float32 on the CPU."""
    return model(input_ids=torch.tensor([ids], device=model.device), logits_to_keep=1).logits[0, -1].float().cpu()


def compare(ours: list[list[int]], run_model, ref_model, prompts: list[list[int]], k: int) -> list[ParityRow]:
    """One row per prompt. run_model is transformers in the run dtype, ref_model in float32 (the same object when the
    run dtype is float32)."""
    rows = []
    for prompt, mine in zip(prompts, ours, strict=True):
        run, _ = hf_greedy(run_model, prompt, k)
        ref, ref_logits = hf_greedy(ref_model, prompt, k, logits=True)
        row = ParityRow(len(prompt), first_divergence(mine, run), first_divergence(run, ref),
                        first_divergence(mine, ref))
        d = row.ours_vs_ref
        if d < k:
            row.margin, row.tolerance = judge(ref_logits[d], last_logits(run_model, prompt + ref[:d]), ref[d], mine[d])
        rows.append(row)
    return rows


def render(rows: list[ParityRow], run_dtype: str, k: int) -> list[str]:
    """The per-prompt lines and a summary (pure)."""
    lines = [f"prompt tokens | ours = transformers {run_dtype} until | transformers {run_dtype} = float32 until | "
             f"ours = float32 until | float32 margin | tolerance | verdict   (of {k} tokens)"]
    for r in rows:
        lines.append(f"{r.prompt_len:13d} | {r.ours_vs_run:31d} | {r.run_vs_ref:33d} | {r.ours_vs_ref:20d} | "
                     f"{r.margin:14.4g} | {r.tolerance:9.4g} | {'ok' if r.ok else 'FAIL'}")
    lines.append(summary(rows, run_dtype))
    return lines


def summary(rows: list[ParityRow], run_dtype: str) -> str:
    held = sum(r.ours_vs_ref >= r.run_vs_ref for r in rows)
    return (f"parity: {sum(r.ok for r in rows)}/{len(rows)} prompts pass; ours kept the float32 tokens at least as "
            f"long as transformers {run_dtype} on {held}/{len(rows)}")
