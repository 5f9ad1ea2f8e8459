"""The CPU quantized matmul, ours (kernels/cpu_quant_matmul.c) against torch's packed int4 one, side by side in one
process.

    python3 -P -m floodway.engine.bench.int4_matmul [--threads 1] [--repeat 200] [--rows 1,2,4,5,8,16,64,512]
        [--model-step]

Each row times one `quant.linear.CpuLinear` call (activations bf16, as served) at a SmolLM2 shape: its Q4_1 layer
linears and its Q8_0 tied head (8-bit codes: ours whole, torch's as two nibble planes), round-to-nearest codes of a
random weight, both kernels in alternating rounds (the best of three), and prints microseconds, torch / ours, and each
kernel's largest error against x @ w.T of the dequantized weight in float32, relative to the largest output. One
weight called again and again sits in the caches; --model-step also times the 120 layer linears of SmolLM2's 30
layers called in turn, as a decode step calls them, at 4 bits (66 MB of codes, scales and zeros: the shipped Q4_1)
and 8 (the Q8_0 file's), which come from memory each time (the median of 30 passes a round).
"""

import argparse
import statistics
import time

import torch
from floodway.engine.bench.gpu_check_speed import seconds_per_call
from floodway.engine.kernels import cpu
from floodway.engine.quant import linear, weights

CPU = torch.device("cpu")
SHAPES = {"qkv": (960, 576, 4), "o_proj": (576, 576, 4), "gate_up": (3072, 576, 4), "down_proj": (576, 1536, 4),
          "lm_head (Q8_0)": (49152, 576, 8)}  # out, in, bits
LAYERS = 30  # SmolLM2's decoder layers, each with the four 4-bit linears above


def compare(out_f: int, in_f: int, bits: int, rows: int, repeat: int, rounds: int = 3) -> dict:
    qw = weights.rtn(torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(0)), bits)
    x = torch.randn(rows, in_f, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    want = x.float() @ qw.dequantize().T
    shipped, lins = linear.CPU_INT4, {}
    try:
        for name in ("ours", "torch"):
            linear.CPU_INT4 = name
            lins[name] = linear.make(qw, None, CPU, torch.bfloat16)
    finally:
        linear.CPU_INT4 = shipped
    best = {}
    for _ in range(rounds):
        for name, lin in lins.items():
            best[name] = min(best.get(name, float("inf")), seconds_per_call(lambda f=lin: f(x), CPU, repeat))
    err = {name: ((lin(x).float() - want).abs().max() / want.abs().max()).item() for name, lin in lins.items()}
    return {**best, **{f"err {name}": e for name, e in err.items()}}


def model_step(rows: int, bits: int, rounds: int = 3, passes: int = 30) -> dict:
    """Seconds of one pass over SmolLM2's layer linears (fresh `bits` weights each) at `rows`, per kernel, and the
    bytes of our kernel's codes, scales and zeros."""
    layer_shapes = [(out_f, in_f) for out_f, in_f, b in SHAPES.values() if b == 4]  # not the Q8_0 head
    shipped, lins = linear.CPU_INT4, {"ours": [], "torch": []}
    try:
        for _ in range(LAYERS):
            for out_f, in_f in layer_shapes:
                qw = weights.rtn(torch.randn(out_f, in_f), bits)
                for name, kept in lins.items():
                    linear.CPU_INT4 = name
                    kept.append(linear.make(qw, None, CPU, torch.bfloat16))
    finally:
        linear.CPU_INT4 = shipped
    xs = {in_f: torch.randn(rows, in_f).to(torch.bfloat16) for _, in_f in layer_shapes}
    best = {}
    for _ in range(rounds):
        for name, kept in lins.items():
            times = []
            for _ in range(passes):
                start = time.perf_counter()
                for lin in kept:
                    lin(xs[lin.in_features])
                times.append(time.perf_counter() - start)
            best[name] = min(best.get(name, float("inf")), statistics.median(times))
    nbytes = sum(t.numel() * t.element_size() for lin in lins["ours"] for t in (lin.packed, lin.scales, lin.zeros)
                 if t is not None)  # symmetric 8-bit codes keep no zeros
    return {**best, "bytes": nbytes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=200, help="calls per timing at one row (fewer for more rows)")
    ap.add_argument("--rows", default="1,2,4,5,8,16,64,512", help="comma list of row counts")
    ap.add_argument("--model-step", action="store_true", help="also time SmolLM2's 120 layer linears in turn")
    args = ap.parse_args(argv)
    if not cpu.available():
        print("our kernel is not available here (no AVX-512 BF16, or not built): nothing to compare")
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU quantized matmul, bf16 activations, {torch.get_num_threads()} thread(s)")
    print("| linear | out x in | rows | torch us | ours us | torch / ours | error torch | error ours |")
    print("|---|---|---|---|---|---|---|---|")
    for slot, (out_f, in_f, bits) in SHAPES.items():
        for rows in map(int, args.rows.split(",")):
            repeat = max(2, args.repeat * 576 * 3072 // (out_f * in_f * max(1, rows // 4)))
            r = compare(out_f, in_f, bits, rows, repeat)
            print(f"| {slot} | {out_f} x {in_f} | {rows} | {r['torch'] * 1e6:.1f} | {r['ours'] * 1e6:.1f} | "
                  f"{r['torch'] / r['ours']:.2f}x | {r['err torch']:.1e} | {r['err ours']:.1e} |")
    if args.model_step:
        print("\nSmolLM2's 120 layer linears called in turn (their codes read from memory)")
        print("| bits | rows | torch ms | ours ms | torch / ours | ours MB a pass | ours GB/s |")
        print("|---|---|---|---|---|---|---|")
        for bits in (4, 8):
            for rows in map(int, args.rows.split(",")):
                r = model_step(rows, bits)
                print(f"| {bits} | {rows} | {r['torch'] * 1e3:.2f} | {r['ours'] * 1e3:.2f} | "
                      f"{r['torch'] / r['ours']:.2f}x | {r['bytes'] / 1e6:.1f} | {r['bytes'] / r['ours'] / 1e9:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
