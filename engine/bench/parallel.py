"""Parallel sampling: each prompt as one request with n choices against the same prompt sent as n separate
requests (what a client does where n > 1 is refused), on one engine, side by side.

Both runs sample (temperature 1, seeded, EOS ignored) the same number of tokens per sequence, all requests
submitted at once, on fresh prompts of the given lengths (so neither hits the other's or an earlier run's
prefix cache; the separate requests may hit each other's, as they would in use). They report output tokens
per second and per CPU-second, the peak KV blocks in use, prompt tokens computed (prompt tokens admitted less
prefix-cache hits: n > 1 computes each prompt once) and preemptions.
"""

import random

from floodway.engine.bench.systems import Clock
from floodway.engine.sampling_params import SamplingParams


def run_once(engine, lengths: list[int], max_tokens: list[int], n: int, together: bool, tag: str) -> dict:
    rng = random.Random(tag)
    prompts = [[rng.randrange(4, engine.runner.vocab_size) for _ in range(m)] for m in lengths]
    before = engine.stats()
    clock = Clock()
    for i, (p, k) in enumerate(zip(prompts, max_tokens, strict=True)):
        if together:
            engine.add_request(f"{tag}-{i}", p, SamplingParams(max_tokens=k, n=n, seed=i, ignore_eos=True))
        else:
            for j in range(n):
                engine.add_request(f"{tag}-{i}-{j}", p, SamplingParams(max_tokens=k, seed=i + j, ignore_eos=True))
    tokens = peak = 0
    while engine.has_unfinished_requests():
        tokens += sum(len(out.new_token_ids) for out in engine.step())
        s = engine.stats()
        peak = max(peak, s.num_total_blocks - s.num_free_blocks)
    seconds, cpu = clock.stop()
    after = engine.stats()
    computed = after.prefix_cache_queries_total - before.prefix_cache_queries_total \
        - (after.prefix_cache_hits_total - before.prefix_cache_hits_total)
    return dict(tokens=tokens, seconds=seconds, cpu=cpu, peak_blocks=peak, prompt_computed=computed,
                preemptions=after.num_preemptions_total - before.num_preemptions_total)


def compare(engine, lengths: list[int], max_tokens: list[int], n: int) -> str:
    """A table: n choices per request against n requests per prompt, with ours-over-separate ratios."""
    run_once(engine, lengths[:1], [4], n, True, "warm-n")  # the fork and copy paths warmed, unreported
    rows = [(f"n={n} per request", run_once(engine, lengths, max_tokens, n, True, "n")),
            (f"{n} separate requests", run_once(engine, lengths, max_tokens, n, False, "sep"))]
    ours, sep = rows[0][1], rows[1][1]
    lines = [f"{len(lengths)} prompts of {min(lengths)}-{max(lengths)} tokens, {n} sampled sequences each "
             f"({sum(max_tokens) * n} output tokens), prefix caching "
             f"{'on' if engine.kv.pool.enable_caching else 'off'}",
             "| run | output tok/s | tok/CPU-s | peak KV blocks | prompt tokens computed | preemptions | seconds |",
             "|---|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {_rate(r, 'seconds'):,.1f} | {_rate(r, 'cpu'):,.1f} | "
                     f"{r['peak_blocks']} | {r['prompt_computed']} | {r['preemptions']} | {r['seconds']:.1f} |")
    lines.append(f"n={n} over separate: {_rate(ours, 'seconds') / _rate(sep, 'seconds'):.2f}x tok/s, "
                 f"{_rate(ours, 'cpu') / _rate(sep, 'cpu'):.2f}x tok/CPU-s, "
                 f"{ours['peak_blocks'] / sep['peak_blocks']:.2f}x peak KV blocks, "
                 f"{ours['prompt_computed'] / max(sep['prompt_computed'], 1):.2f}x prompt tokens computed")
    return "\n".join(lines)


def _rate(r: dict, per: str) -> float:
    return r["tokens"] / r[per] if r[per] else float("nan")
