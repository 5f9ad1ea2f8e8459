"""A speculative verify's attention on CPU, side by side: short chunks after a cached prefix through the SDPA path
with each KV group's query heads folded into the query length (attention.FOLD_ROWS, as shipped) and without.

    python3 -P -m floodway.engine.bench.verify_attention [--threads 1] [--repeat 200]

Each row times one layer call (`attention.paged_attention`, the K/V write and gather included) for one sequence
with `drafts + 1` new tokens after `context` cached ones, in SmolLM2's shape (9 heads over 3 KV heads, head_dim 64,
blocks of 16), folded and unfolded in alternating rounds, and prints microseconds, unfolded / folded and the largest
difference of the two outputs.
"""

import argparse
import types

import torch
from floodway.engine import attention
from floodway.engine.bench.gpu_check_speed import seconds_per_call
from floodway.engine.bench.kernels import step
from floodway.engine.step_inputs import build

SHAPE = dict(heads=9, kv_heads=3, head_dim=64, block_size=16)
CONTEXTS = (128, 400, 1200)
NEW_TOKENS = (2, 4, 6, 9)  # drafts + 1: 9 is the most that folds for 3 query heads per KV head (FOLD_ROWS 32)


def compare(dtype: torch.dtype, context: int, new: int, repeat: int, rounds: int = 3) -> dict:
    """Seconds per layer call folded and unfolded (the best of `rounds` alternating runs) and the largest output
    difference, for one verify step."""
    seqs, k_cache, v_cache, query, key, value = step({**SHAPE, "dtype": dtype}, [(context, new)], torch.device("cpu"))
    meta = build(seqs, SHAPE["block_size"], [k_cache], [v_cache], "cpu", kernels=False)[0]
    layer = types.SimpleNamespace(layer_idx=0)
    shipped, best, out = attention.FOLD_ROWS, {}, {}
    try:
        for _ in range(rounds):
            for name, rows in (("folded", shipped), ("unfolded", 0)):
                attention.FOLD_ROWS = rows

                def call():
                    return attention.paged_attention(layer, query, key, value, None, floodway_meta=meta)

                out[name] = call()[0].float()
                best[name] = min(best.get(name, float("inf")), seconds_per_call(call, torch.device("cpu"), repeat))
    finally:
        attention.FOLD_ROWS = shipped
    return {**best, "diff": (out["folded"] - out["unfolded"]).abs().max().item()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=200, help="calls per timing")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"verify attention, one layer: {SHAPE}, {torch.get_num_threads()} thread(s), FOLD_ROWS "
          f"{attention.FOLD_ROWS}")
    print("| dtype | context | new tokens | unfolded us | folded us | unfolded / folded | max diff |")
    print("|---|---|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        for context in CONTEXTS:
            for new in NEW_TOKENS:
                r = compare(dtype, context, new, args.repeat)
                print(f"| {str(dtype).removeprefix('torch.')} | {context} | {new} | {r['unfolded'] * 1e6:.0f} | "
                      f"{r['folded'] * 1e6:.0f} | {r['unfolded'] / r['folded']:.2f}x | {r['diff']:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
