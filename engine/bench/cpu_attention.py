"""Our CPU paged attention (kernels/cpu_attention.c) against the SDPA path it replaced, side by side in one process.

    python3 -P -m floodway.engine.bench.cpu_attention [--threads 1] [--repeat 200] [--dtypes bfloat16,float32]

Each row times one layer call (`attention.paged_attention`, the K/V write included) of one step in SmolLM2's shape
(9 heads over 3 KV heads, head_dim 64, blocks of 16, scattered): batches of decodes (the SDPA path gathers their
blocks and attends in groups), a speculative verify's tokens after a cached prefix (folded SDPA) and chunks of 32
tokens. Both paths run on every row (attention.KERNEL_ROWS sets which the engine sends to ours), in alternating
rounds (the best of three); it prints microseconds, SDPA / ours and the largest difference of the two outputs.
"""

import argparse
import random
import types

import torch
from floodway.engine import attention
from floodway.engine.bench.gpu_check_speed import seconds_per_call
from floodway.engine.bench.kernels import step
from floodway.engine.step_inputs import build

SHAPE = dict(heads=9, kv_heads=3, head_dim=64, block_size=16)
# (name, [(cached positions, new tokens)]): decode batches at the chat bench's contexts and longer, verifies of
# 5 and 9 tokens (4 and 8 drafts), and chunks of 32 tokens.
_rng = random.Random(0)
CASES = [(f"{n} decodes, context {lo}-{hi}", [(_rng.randint(lo, hi), 1) for _ in range(n)])
         for n, lo, hi in ((1, 150, 150), (1, 1000, 1000), (8, 100, 300), (32, 100, 300), (32, 300, 700))] + [
    (f"{new} tokens after {prefix}", [(prefix, new)]) for prefix in (128, 1200) for new in (5, 9)] + [
    (f"32 tokens after {prefix}", [(prefix, 32)]) for prefix in (0, 600)]


def compare(dtype: torch.dtype, rows: list[tuple[int, int]], repeat: int, rounds: int = 3) -> dict:
    """Seconds per layer call on each path (the best of `rounds` alternating runs) and the largest difference."""
    seqs, k_cache, v_cache, query, key, value = step({**SHAPE, "dtype": dtype}, rows, torch.device("cpu"))
    layer, best, out = types.SimpleNamespace(layer_idx=0), {}, {}
    metas = {path: build(seqs, SHAPE["block_size"], [k_cache], [v_cache], "cpu", path=path)[0]
             for path in ("sdpa", "cpu")}
    for _ in range(rounds):
        for path, meta in metas.items():
            def call(meta=meta):
                return attention.paged_attention(layer, query, key, value, None, floodway_meta=meta)

            out[path] = call()[0].float()
            best[path] = min(best.get(path, float("inf")), seconds_per_call(call, torch.device("cpu"), repeat))
    return {**best, "diff": (out["sdpa"] - out["cpu"]).abs().max().item()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=200, help="calls per timing (fewer for larger steps)")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="comma list of torch dtypes")
    args = ap.parse_args(argv)
    if not attention.CPU_KERNEL:
        print("our CPU attention kernel is not available here (not built, or no AVX-512 BF16)")
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"one attention layer call: {SHAPE}, {torch.get_num_threads()} thread(s)")
    print("| dtype | step | SDPA path us | ours us | SDPA / ours | max diff |")
    print("|---|---|---|---|---|---|")
    for name in args.dtypes.split(","):
        for label, rows in CASES:
            work = sum(p + n for p, n in rows) * max(n for _, n in rows)
            r = compare(getattr(torch, name), rows, max(2, args.repeat * 150 // work))
            print(f"| {name} | {label} | {r['sdpa'] * 1e6:.0f} | {r['cpu'] * 1e6:.0f} | {r['sdpa'] / r['cpu']:.2f}x | "
                  f"{r['diff']:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
