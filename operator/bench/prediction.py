"""`floodway bench prediction`: how far the gateway's predicted TTFT is from the TTFT real engines give.

The gateway keeps a request local while its predicted TTFT (the prompt tokens ahead of it on the engine and its
own, at the prefill rate the engine exports from its step times) is within `predicted_ttft_factor` of the SLO, so
that factor must cover the prediction's error. Engine processes with a slow, chunked prefill (scarce by
configuration), one gateway with a TTFT SLO and no overflow API, an open-loop stream of distinct prompts (no
prefix-cache hits) of 40-400 tokens; the gateway's `floodway_gateway_ttft_over_predicted` histogram gives actual
over predicted TTFT for the answers predicted near the overflow threshold.
"""

from __future__ import annotations

import asyncio
import random
import tempfile

import httpx
from floodway.operator.bench.gateway import bucket_quantile, histogram_buckets
from floodway.operator.bench.loadgen import send_each_at_rate
from floodway.operator.bench.routing import _start_engines, _start_gateway
from floodway.operator.gateway.metrics import MARGIN_BOUND, WATCHED_SHARE
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.stats import quantile

RATIO = "floodway_gateway_ttft_over_predicted"
WORDS = "the river rose over the fields and into the town "  # 10 words, 49 characters: ~12 tokens by estimate


def prompts(n: int, seed: int) -> list[str]:
    """n prompts of 40-400 tokens by the gateway's estimate, no two alike from their first block."""
    rng = random.Random(seed)
    return [f"report {seed}-{i}: " + WORDS * rng.randint(3, 32) for i in range(n)]


def run_bench(engines: int, requests: int, rate: float, ttft_slo_ms: float, step_delay_ms: int,
              max_num_batched_tokens: int, max_num_seqs: int, max_tokens: int, model: str, seed: int = 0) -> str:
    if min(engines, requests, max_num_batched_tokens, max_num_seqs, max_tokens) < 1 or rate <= 0 \
            or ttft_slo_ms <= 0 or step_delay_ms < 0:
        raise ValueError("counts and sizes must be >= 1, rate and SLO > 0, step delay >= 0")
    args = ["--step-delay-ms", str(step_delay_ms), "--max-num-batched-tokens", str(max_num_batched_tokens),
            "--max-num-seqs", str(max_num_seqs)]
    with tempfile.TemporaryDirectory(prefix="floodway-bench-prediction-") as tmp:
        started = []
        try:
            started += _start_engines(engines, model, args, tmp)
            gateway = _start_gateway(started, False, seed, tmp, slo={"ttft_ms": ttft_slo_ms})
            started.append(gateway)
            served = httpx.get(started[0].url + "/v1/models").json()["data"][0]["id"]
            url = gateway.url + "/v1/completions"

            def bodies(texts):
                return [{"model": served, "prompt": t, "max_tokens": max_tokens, "stream": True} for t in texts]
            # Warm-up, one at a time: each engine's first forward pass, and the step times its rate comes from.
            asyncio.run(send_each_at_rate(url, bodies(prompts(2 * engines, seed + 1)), 1.0))
            before = histogram_buckets(httpx.get(gateway.url + "/metrics").text, RATIO)
            results = asyncio.run(send_each_at_rate(url, bodies(prompts(requests, seed)), rate))
            after = histogram_buckets(httpx.get(gateway.url + "/metrics").text, RATIO)
        finally:
            for proc in started:
                proc.stop()
    ok = [r for r in results if r.status == 200]
    ttft = [r.first_byte_at - r.sent_at for r in ok]
    counts = {le: a - b for (le, a), (_, b) in zip(after, before, strict=True)}
    n = counts.get(float("inf"), 0.0)
    within = counts.get(MARGIN_BOUND, 0.0)
    q = {p: bucket_quantile(before, after, p) for p in (0.5, 0.9, 0.99)}
    return "\n".join([
        f"prediction bench: {engines} engine(s) ({model}, {' '.join(args)}), one gateway, {requests} distinct "
        f"streamed prompts of 40-400 tokens at {rate:g} req/s open loop, max_tokens {max_tokens}; TTFT SLO "
        f"{ttft_slo_ms:g} ms, no overflow API",
        f"answered {len(ok)}/{len(results)}; TTFT at the client p50 {quantile(ttft, 0.5) * 1000:.0f} ms, "
        f"p99 {quantile(ttft, 0.99) * 1000:.0f} ms",
        f"actual / predicted TTFT over the {n:.0f} answers predicted at least {WATCHED_SHARE:g} x the overflow "
        f"threshold ({WATCHED_SHARE * OverflowPolicy.predicted_ttft_factor * ttft_slo_ms:g} ms): p50 <= {q[0.5]:g}, "
        f"p90 <= {q[0.9]:g}, p99 <= {q[0.99]:g} (bucket bounds); <= 1: {counts.get(1.0, 0.0) / n if n else 0:.0%}, "
        f"<= {MARGIN_BOUND:g} (the shipped predicted_ttft_factor {OverflowPolicy.predicted_ttft_factor:g} covers): "
        f"{within / n if n else 0:.0%}"])
