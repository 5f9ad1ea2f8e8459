"""The CPU quantized matmul, ours (kernels/cpu_quant_matmul.c) against torch's packed int4 one, side by side in one
process.

    python3 -P -m floodway.engine.bench.int4_matmul [--threads 1] [--repeat 200] [--rows 1,2,4,5,8,16,64,512]
        [--model-step]

Each row times one `quant.linear.CpuLinear` call (activations bf16, as served) at a SmolLM2 shape: its Q4_1 layer
linears and its Q8_0 tied head (8-bit codes: ours whole, torch's as two nibble planes), round-to-nearest codes of a
random weight, the kernels in alternating rounds (the best of three): torch's, ours with float32 products and ours with
bf16 pairs (`cpu_quant_matmul.float32_products` picks one by the CPU's maker), and prints microseconds, torch / ours
and bf16 pairs / float32, and each kernel's largest error against x @ w.T of the dequantized weight in float32,
relative to the largest output. One weight called again and again sits in the caches; --model-step also times the
120 layer linears of SmolLM2's 30 layers called in turn, as a decode step calls them, at 4 bits (66 MB of codes,
scales and zeros: the shipped Q4_1) and 8 (the Q8_0 file's), which come from memory each time (the median of 30
passes a round).
"""

import argparse
import copy
import statistics
import time

import torch
from floodway.engine.bench.gpu_check_speed import seconds_per_call
from floodway.engine.kernels import cpu, cpu_quant_matmul
from floodway.engine.quant import linear, weights

CPU = torch.device("cpu")
SHAPES = {"qkv": (960, 576, 4), "o_proj": (576, 576, 4), "gate_up": (3072, 576, 4), "down_proj": (576, 1536, 4),
          "lm_head (Q8_0)": (49152, 576, 8)}  # out, in, bits
LAYERS = 30  # SmolLM2's decoder layers, each with the four 4-bit linears above
KERNELS = ("torch", "float32", "bf16 pairs")  # torch's, then ours with either products


def _kernels(qw: weights.QuantWeight) -> dict:
    """The weight as a linear on each of KERNELS."""
    shipped = linear.CPU_INT4
    try:
        linear.CPU_INT4 = "torch"
        lins = {"torch": linear.make(qw, None, CPU, torch.bfloat16)}
        linear.CPU_INT4 = "ours"
        ours = linear.make(qw, None, CPU, torch.bfloat16)
    finally:
        linear.CPU_INT4 = shipped
    for name, fma in (("float32", True), ("bf16 pairs", False)):
        lins[name] = copy.copy(ours)  # the same packed tensors, the kernel told which products
        lins[name].kernel_args = ours.kernel_args._replace(fma=fma)
    return lins


def compare(out_f: int, in_f: int, bits: int, rows: int, repeat: int, rounds: int = 3) -> dict:
    qw = weights.rtn(torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(0)), bits)
    x = torch.randn(rows, in_f, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    want = x.float() @ qw.dequantize().T
    lins = _kernels(qw)
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
    lins = {name: [] for name in KERNELS}
    for _ in range(LAYERS):
        for out_f, in_f in layer_shapes:
            for name, lin in _kernels(weights.rtn(torch.randn(out_f, in_f), bits)).items():
                lins[name].append(lin)
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
    nbytes = sum(t.numel() * t.element_size() for lin in lins["float32"] for t in (lin.packed, lin.scales, lin.zeros)
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
    shipped = "float32" if cpu_quant_matmul.FMA else "bf16 pairs"
    print(f"CPU quantized matmul, bf16 activations, {torch.get_num_threads()} thread(s); ours: our kernel with the "
          f"products this CPU ({cpu.lib.vendor() or 'unknown maker'}) gets, {shipped}")
    print("| linear | out x in | rows | torch us | float32 us | bf16 pairs us | torch / ours | bf16 pairs / float32 "
          "| error torch | error float32 | error bf16 pairs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for slot, (out_f, in_f, bits) in SHAPES.items():
        for rows in map(int, args.rows.split(",")):
            repeat = max(2, args.repeat * 576 * 3072 // (out_f * in_f * max(1, rows // 4)))
            r = compare(out_f, in_f, bits, rows, repeat)
            print(f"| {slot} | {out_f} x {in_f} | {rows} | " + " | ".join(f"{r[k] * 1e6:.1f}" for k in KERNELS) +
                  f" | {r['torch'] / r[shipped]:.2f}x | {r['bf16 pairs'] / r['float32']:.2f}x | " +
                  " | ".join(f"{r[f'err {k}']:.1e}" for k in KERNELS) + " |")
    if args.model_step:
        print("\nSmolLM2's 120 layer linears called in turn (their codes read from memory)")
        print("| bits | rows | torch ms | float32 ms | bf16 pairs ms | torch / ours | bf16 pairs / float32 | MB a pass "
              "| ours GB/s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for bits in (4, 8):
            for rows in map(int, args.rows.split(",")):
                r = model_step(rows, bits)
                print(f"| {bits} | {rows} | " + " | ".join(f"{r[k] * 1e3:.2f}" for k in KERNELS) +
                      f" | {r['torch'] / r[shipped]:.2f}x | {r['bf16 pairs'] / r['float32']:.2f}x | "
                      f"{r['bytes'] / 1e6:.1f} | {r['bytes'] / r[shipped] / 1e9:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
