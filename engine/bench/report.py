"""Formats benchmark results: a ratio table and KV figures (pure)."""

from floodway.engine.bench.systems import RunResult


def render(workload_desc: str, model: str, results: list[RunResult]) -> str:
    ours = results[0]
    lines = [f"model: {model}", f"workload: {workload_desc}", "",
             "| system | output tok/s | floodway x | tok/CPU-s | floodway x (CPU) | tokens | seconds | CPU s | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | failed | - | - | - | - | - | - | {r.error} |")
            continue
        ratio = ours.tokens_per_s / r.tokens_per_s if r.tokens_per_s else float("nan")
        cpu_ratio = ours.tokens_per_cpu_s / r.tokens_per_cpu_s if r.tokens_per_cpu_s else float("nan")
        lines.append(f"| {r.name} | {r.tokens_per_s:,.1f} | {ratio:.2f}x | {r.tokens_per_cpu_s:,.1f} "
                     f"| {cpu_ratio:.2f}x | {r.output_tokens} | {r.seconds:.1f} | {r.cpu_seconds:.1f} | {r.note} |")
    kv = ours.kv
    if kv:
        lines += ["", "KV cache (floodway engine):",
                  f"  peak blocks in use {kv['peak_blocks']} of {kv['allocated_blocks']} allocated; contiguous "
                  f"max_model_len preallocation for the same running requests: {kv['contiguous_blocks']} blocks",
                  f"  KV utilisation at peak (live tokens / tokens in allocated blocks): {kv['peak_utilization']:.1%}"
                  f" (contiguous preallocation: {kv['contiguous_utilization']:.1%})",
                  f"  prefix-cache hit rate: {kv['prefix_hit_rate']:.1%}; preemptions: {kv['preemptions']}"]
    return "\n".join(lines)
