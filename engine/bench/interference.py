"""Prefill-decode interference: TPOT of requests that decode while long prompts arrive, with and without the
per-step prefill budget (`--tpot-slo-ms`, engine/prefill_budget.py), on one engine, side by side.

Sequences start decoding; then a long prompt arrives every `every_steps` steps until `long_prompts` have;
each decoding request's TPOT is (finish - first token) / (tokens - 1), from the engine's own timestamps, and
the inter-token gaps of all decoding requests give ITL p99 (the steps that carried a prompt).
"""

import random
import statistics
import time

from floodway.engine.sampling_params import SamplingParams
from floodway.operator.stats import quantile


def run_once(engine, tpot_slo_ms: float, decoders: int, decode_tokens: int, long_prompts: int, long_len: int,
             every_steps: int, seed: int) -> dict:
    rng = random.Random(f"{seed}:{tpot_slo_ms}")  # other prompts per run: no prefix-cache hits from the last
    vocab = engine.runner.vocab_size
    engine.config.tpot_slo_ms = tpot_slo_ms  # on the step times the runs before measured, as a serving engine's
    for i in range(decoders):
        engine.add_request(f"dec-{i}", [rng.randrange(4, vocab) for _ in range(16)],
                           SamplingParams(max_tokens=decode_tokens, ignore_eos=True))
    while any(not r.output_token_ids for seqs in engine.requests.values() for r in seqs):
        engine.step()
    done, step, sent, last, gaps = {}, 0, 0, {}, []
    while engine.has_unfinished_requests():
        if sent < long_prompts and step % every_steps == 0:
            engine.add_request(f"long-{sent}", [rng.randrange(4, vocab) for _ in range(long_len)],
                               SamplingParams(max_tokens=2, ignore_eos=True))
            sent += 1
        for out in engine.step():
            now = time.perf_counter()
            if out.request_id.startswith("dec-"):
                if out.request_id in last:
                    gaps.append(now - last[out.request_id])
                last[out.request_id] = now
            if out.finished:
                done[out.request_id] = out
        step += 1
    tpot = [(o.metrics.finished_time - o.metrics.first_token_time) / (len(o.output_token_ids) - 1)
            for rid, o in done.items() if rid.startswith("dec-")]
    ttft = [o.metrics.first_token_time - o.metrics.arrival_time for rid, o in done.items() if rid.startswith("long-")]
    times = engine.step_times
    return {"tpot_slo_ms": tpot_slo_ms, "tpot_p50_ms": 1000 * quantile(tpot, 0.5),
            "decode_ms": 1000 * (times.decode_s or 0.0), "prefill_us": 1e6 * (times.s_per_prefill_token or 0.0),
            "tpot_p99_ms": 1000 * quantile(tpot, 0.99), "itl_p99_ms": 1000 * quantile(gaps, 0.99),
            "long_ttft_p50_s": statistics.median(ttft), "steps": step}


def compare(engine, tpot_slo_ms: float, decoders: int = 16, decode_tokens: int = 64, long_prompts: int = 8,
            long_len: int | None = None, every_steps: int = 2, seed: int = 0) -> str:
    """Runs the same arrivals without and with the budget; a table of TPOT p50/p99 and long-prompt TTFT."""
    long_len = long_len or engine.max_model_len - 4
    run_once(engine, 0.0, 2, 8, 2, long_len, every_steps, seed - 1)  # warm-up: shapes and step times, unreported
    rows = [run_once(engine, slo, decoders, decode_tokens, long_prompts, long_len, every_steps, seed)
            for slo in (0.0, tpot_slo_ms)]
    head = (f"TPOT of {decoders} decoding requests ({decode_tokens} tokens) while {long_prompts} prompts of "
            f"{long_len} tokens arrive, one every {every_steps} steps")
    lines = [head, "| prefill budget | TPOT p50 ms | TPOT p99 ms | ITL p99 ms | long-prompt TTFT p50 s | steps "
                   "| decode step ms | prefill us/token |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = f"--tpot-slo-ms {r['tpot_slo_ms']:g}" if r["tpot_slo_ms"] else "off"
        lines.append(f"| {name} | {r['tpot_p50_ms']:.1f} | {r['tpot_p99_ms']:.1f} | {r['itl_p99_ms']:.1f} | "
                     f"{r['long_ttft_p50_s']:.3f} | "
                     f"{r['steps']} | {r['decode_ms']:.1f} | {r['prefill_us']:.0f} |")
    return "\n".join(lines)
