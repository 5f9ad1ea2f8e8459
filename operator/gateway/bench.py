"""`floodway bench gateway`: latency and throughput through the gateway against direct engine access.

One engine and one gateway in front of it (real processes on 127.0.0.1). An open-loop client sends
requests at a fixed rate for a fixed time, first straight to the engine, then through the gateway, and
prints both side by side with the difference (the added latency) and the gateway's own in-process
overhead histogram.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import httpx
import yaml
from floodway.operator import procs
from floodway.operator.gateway.loadgen import send_at_rate


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _phase(url: str, model: str, rate: float, duration: float, max_tokens: int) -> dict:
    body = {"model": model, "prompt": "The quick brown fox", "max_tokens": max_tokens, "temperature": 0}
    await send_at_rate(url + "/v1/completions", body, 10, 10.0)  # warm connections and the engine
    results = await send_at_rate(url + "/v1/completions", body, int(rate * duration), rate)
    ok = [r for r in results if r.status == 200]
    latencies = [r.latency for r in ok]
    elapsed = max(r.done_at for r in results) - min(r.sent_at for r in results)
    return {"sent": len(results), "ok": len(ok), "failed": len(results) - len(ok), "throughput": len(ok) / elapsed,
            "p50": _percentile(latencies, 0.5), "p99": _percentile(latencies, 0.99)}


def _overhead_quantiles(metrics_text: str) -> tuple[float, float, int]:
    """p50/p99 upper bucket bounds of floodway_gateway_added_latency_seconds, and its count."""
    buckets = []
    for line in metrics_text.splitlines():
        if line.startswith("floodway_gateway_added_latency_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1] if buckets else 0
    quantile = lambda q: next((le for le, c in buckets if c >= q * total), float("nan"))  # noqa: E731
    return quantile(0.5), quantile(0.99), int(total)


def run_bench(rate: float, duration: float, model: str, max_tokens: int) -> str:
    if rate <= 0 or duration <= 0 or max_tokens < 1:
        raise ValueError("rate and duration must be > 0 and max_tokens >= 1")
    with tempfile.TemporaryDirectory(prefix="floodway-bench-gw-") as tmp:
        engine_port, gateway_port = procs.free_port(), procs.free_port()
        engine = procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", model, "--port", str(engine_port),
                                                    "--host", "127.0.0.1"],
                             engine_port, timeout_s=300, log_path=os.path.join(tmp, "engine.log"))
        gateway = None
        try:
            config_path = os.path.join(tmp, "gateway.yaml")
            with open(config_path, "w") as f:
                yaml.safe_dump({"host": "127.0.0.1", "port": gateway_port, "backends": {"static": [engine.url]}}, f)
            gateway = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", config_path, "--log-level", "warning"],
                                  gateway_port, timeout_s=60, log_path=os.path.join(tmp, "gateway.log"))
            served = httpx.get(engine.url + "/v1/models").json()["data"][0]["id"]
            direct = asyncio.run(_phase(engine.url, served, rate, duration, max_tokens))
            via = asyncio.run(_phase(gateway.url, served, rate, duration, max_tokens))
            o50, o99, count = _overhead_quantiles(httpx.get(gateway.url + "/metrics").text)
        finally:
            if gateway is not None:
                gateway.stop()
            engine.stop()
    ms = lambda s: f"{s * 1000:8.2f}"  # noqa: E731
    rows = [f"gateway bench: {rate:g} req/s for {duration:g} s per phase, max_tokens={max_tokens}, model {model}",
            f"{'path':<10} {'sent':>6} {'ok':>6} {'failed':>6} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}"]
    for name, r in (("direct", direct), ("gateway", via)):
        rows.append(f"{name:<10} {r['sent']:>6} {r['ok']:>6} {r['failed']:>6} {r['throughput']:>8.1f} "
                    f"{ms(r['p50'])} {ms(r['p99'])}")
    rows.append(f"{'added':<10} {'':>6} {'':>6} {'':>6} {via['throughput'] / direct['throughput']:>7.2f}x "
                f"{ms(via['p50'] - direct['p50'])} {ms(via['p99'] - direct['p99'])}")
    rows.append(f"gateway in-process overhead (received -> sent upstream, {count} requests): "
                f"p50 <= {o50 * 1000:.2f} ms, p99 <= {o99 * 1000:.2f} ms (histogram bucket bounds)")
    return "\n".join(rows)
