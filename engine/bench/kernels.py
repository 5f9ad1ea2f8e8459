"""One attention layer, side by side: the Triton kernels against today's gather + SDPA path, on the same step.

    python3 -P -m floodway.engine.bench.kernels [--cpu]   (e2e/gpu/check.sh's shim makes floodway importable)

Each row times `attention.paged_attention` (the layer call the engine makes, the new token's K/V write included)
with the SDPA metadata and with the kernel metadata on one step of random K/V in shuffled blocks: decodes at
several batch sizes and context lengths, and prefill chunks after cached prefixes. It prints microseconds per
call, SDPA / kernel, the largest difference of the two outputs, and for decode the kernel's K/V read rate as a
share of the device's measured copy bandwidth. It exits 1 when a difference exceeds the dtype's tolerance, so a
GPU session also learns whether the compiled kernels are right. --cpu runs tiny shapes through Triton's interpreter
(seconds: it keeps the command from rotting; its times say nothing).
"""

import argparse
import functools
import os
import random
import types

import torch
from floodway.engine import attention, kv_cache
from floodway.engine.bench.gpu_check_speed import copy_bandwidth, seconds_per_call
from floodway.engine.step_inputs import SeqInput, build

GPU = dict(heads=32, kv_heads=8, head_dim=128, block_size=16, dtype=torch.bfloat16, batches=(1, 8, 32, 128),
           contexts=(512, 2048, 8192), prefills=((0, 512), (1536, 512), (7680, 512)), repeat=20)
CPU = dict(heads=4, kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32, batches=(1, 3), contexts=(9, 16),
           prefills=((0, 5), (6, 3)), repeat=1)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}  # largest |sdpa - kernel| allowed


def step(shape: dict, rows: list[tuple[int, int]], device: torch.device, seed: int = 0):
    """(seqs, k cache, v cache, query, key, value) for rows of (cached positions, new tokens), blocks shuffled."""
    bs = shape["block_size"]
    rng = random.Random(seed)
    need = [-(-(p + n) // bs) for p, n in rows]
    ids = list(range(sum(need)))
    rng.shuffle(ids)
    seqs, used = [], 0
    for (p, n), k in zip(rows, need, strict=True):
        seqs.append(SeqInput([1] * n, p, ids[used:used + k], True))
        used += k
    kv = kv_cache.KVShape(1, shape["kv_heads"], shape["head_dim"], bs, shape["dtype"])
    (k_cache,), (v_cache,) = kv_cache.allocate(kv, len(ids), device)  # the engine's layout
    for cache in (k_cache, v_cache):
        cache.normal_()
    tokens = sum(n for _, n in rows)
    query, key, value = (torch.randn(1, h, tokens, shape["head_dim"], device=device).to(shape["dtype"])
                         for h in (shape["heads"], shape["kv_heads"], shape["kv_heads"]))
    return seqs, k_cache, v_cache, query, key, value


def compare(shape: dict, rows: list[tuple[int, int]], device: torch.device) -> dict:
    """Seconds per layer call on each path and the largest output difference, for one step."""
    seqs, k_cache, v_cache, query, key, value = step(shape, rows, device)
    layer = types.SimpleNamespace(layer_idx=0)
    result = {}
    for name, path in (("sdpa", "sdpa"), ("kernel", "triton")):
        meta = build(seqs, shape["block_size"], [k_cache], [v_cache], device, path=path)[0]
        call = functools.partial(attention.paged_attention, layer, query, key, value, None, floodway_meta=meta)
        result[name] = call()[0].float()
        result[name + "_s"] = seconds_per_call(call, device, shape["repeat"])
    result["diff"] = (result.pop("sdpa") - result.pop("kernel")).abs().max().item()
    return result


def kv_bytes(shape: dict, rows: list[tuple[int, int]]) -> int:
    """K and V bytes a pass over the rows' contexts reads."""
    per_position = 2 * shape["kv_heads"] * shape["head_dim"] * shape["dtype"].itemsize
    return per_position * sum(p + n for p, n in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="tiny shapes in Triton's interpreter (a dry run)")
    args = ap.parse_args(argv)
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported, by the first kernel call
    shape, device = (CPU, torch.device("cpu")) if args.cpu else (GPU, torch.device("cuda"))
    torch.manual_seed(0)
    bandwidth = None if args.cpu else copy_bandwidth(device, 1 << 30)
    print(f"paged attention, one layer: {shape['heads']} heads, {shape['kv_heads']} KV heads, head_dim "
          f"{shape['head_dim']}, block {shape['block_size']}, {shape['dtype']}, {device}"
          + (f", copy bandwidth {bandwidth / 1e9:.0f} GB/s" if bandwidth else ""))
    print("| step | sdpa us | kernel us | sdpa / kernel | max diff | kernel K/V read / copy bw |")
    print("|---|---|---|---|---|---|")
    cases = [(f"decode x{b}, context {c}", [(c - 1, 1)] * b) for b in shape["batches"] for c in shape["contexts"]]
    cases += [(f"prefill {n} after {p}", [(p, n)]) for p, n in shape["prefills"]]
    wrong = []
    for label, rows in cases:
        r = compare(shape, rows, device)
        if not r["diff"] <= TOLERANCE[shape["dtype"]]:  # NaN fails too
            wrong.append(label)
        share = (f"{kv_bytes(shape, rows) / r['kernel_s'] / bandwidth:.0%}"
                 if bandwidth and label.startswith("decode") else "-")
        print(f"| {label} | {r['sdpa_s'] * 1e6:.0f} | {r['kernel_s'] * 1e6:.0f} | "
              f"{r['sdpa_s'] / r['kernel_s']:.2f}x | {r['diff']:.2g} | {share} |")
    if wrong:
        print(f"FAIL: the kernel path differs from SDPA beyond {TOLERANCE[shape['dtype']]:g} in: {', '.join(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
