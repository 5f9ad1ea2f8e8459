"""A chunk after a cached prefix on CPU, side by side: the SDPA path as shipped (a speculative verify's few tokens
with each KV group's query heads folded into the query length, attention.FOLD_ROWS; a long chunk attending to the
prefix and to itself in two passes, attention.SPLIT_MIN) against one masked SDPA call over the whole context.

    python3 -P -m floodway.engine.bench.chunk_attention [--threads 1] [--repeat 200] [--dtypes bfloat16,float32]

Each row times one layer call (`attention.paged_attention`, the K/V write and gather included) for one sequence
with `new` tokens after `prefix` cached ones, in SmolLM2's shape (9 heads over 3 KV heads, head_dim 64, blocks of
16), both ways in alternating rounds, and prints microseconds, masked / shipped and the largest difference of the
two outputs. Long chunks repeat fewer calls (repeat x 16 / new, at least 2).
"""

import argparse
import types

import torch
from floodway.engine import attention
from floodway.engine.bench.gpu_check_speed import seconds_per_call
from floodway.engine.bench.kernels import step
from floodway.engine.step_inputs import build

SHAPE = dict(heads=9, kv_heads=3, head_dim=64, block_size=16)
# (prefix, new tokens): verifies of 2-9 tokens (9 is the most that folds for 3 query heads per KV head), then chunks
# of a long prompt's prefill (the default token budget is 2,048) and after a prefix-cache hit.
CASES = [(p, n) for p in (128, 400, 1200) for n in (2, 4, 6, 9)] + [
    (p, n) for p in (128, 400, 2048) for n in (64, 512, 768, 2048)]


def compare(dtype: torch.dtype, prefix: int, new: int, repeat: int, rounds: int = 3) -> dict:
    """Seconds per layer call as shipped and as one masked call (the best of `rounds` alternating runs) and the
    largest output difference, for one chunk."""
    seqs, k_cache, v_cache, query, key, value = step({**SHAPE, "dtype": dtype}, [(prefix, new)], torch.device("cpu"))
    meta = build(seqs, SHAPE["block_size"], [k_cache], [v_cache], "cpu", path="sdpa")[0]
    layer = types.SimpleNamespace(layer_idx=0)
    shipped, best, out = (attention.FOLD_ROWS, attention.SPLIT_MIN), {}, {}
    try:
        for _ in range(rounds):
            for name, (fold, split) in (("shipped", shipped), ("masked", (0, float("inf")))):
                attention.FOLD_ROWS, attention.SPLIT_MIN = fold, split

                def call():
                    return attention.paged_attention(layer, query, key, value, None, floodway_meta=meta)

                out[name] = call()[0].float()
                best[name] = min(best.get(name, float("inf")), seconds_per_call(call, torch.device("cpu"), repeat))
    finally:
        attention.FOLD_ROWS, attention.SPLIT_MIN = shipped
    return {**best, "diff": (out["shipped"] - out["masked"]).abs().max().item()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=200, help="calls per timing (for chunks of up to 16 tokens)")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="comma list of torch dtypes")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"a chunk after a cached prefix, one layer: {SHAPE}, {torch.get_num_threads()} thread(s), FOLD_ROWS "
          f"{attention.FOLD_ROWS}, SPLIT_MIN {attention.SPLIT_MIN}")
    print("| dtype | prefix | new tokens | masked us | shipped us | masked / shipped | max diff |")
    print("|---|---|---|---|---|---|---|")
    for name in args.dtypes.split(","):
        for prefix, new in CASES:
            r = compare(getattr(torch, name), prefix, new, max(2, args.repeat * min(16, new) // new))
            print(f"| {name} | {prefix} | {new} | {r['masked'] * 1e6:.0f} | {r['shipped'] * 1e6:.0f} | "
                  f"{r['masked'] / r['shipped']:.2f}x | {r['diff']:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
