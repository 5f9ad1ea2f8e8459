"""`floodway bench gateway`: latency and throughput through the gateway against direct engine access.

One engine and one gateway in front of it (real processes on 127.0.0.1). For each rate, an open-loop
client sends requests at that fixed total rate for a fixed time, alternately straight to the engine and
through the gateway (so both paths meet the same engine load), and prints both side by side with the
difference (the added latency), the gateway's own in-process overhead histogram and its CPU time per
request. A rate beyond what the engine sustains measures the engine's queue more than the gateway: run
one it sustains too.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

import httpx
import yaml
from floodway.operator import procs
from floodway.operator.bench.loadgen import send_at_rate
from floodway.operator.gateway.backends import parse_engine_load
from floodway.operator.stats import quantile


def _summary(results: list, expected: int) -> dict:
    ok = [r for r in results if r.status == expected]
    latencies = [r.latency for r in ok]
    elapsed = max(r.done_at for r in results) - min(r.sent_at for r in results)
    return {"sent": len(results), "ok": len(ok), "failed": len(results) - len(ok), "throughput": len(ok) / elapsed,
            "p50": quantile(latencies, 0.5), "p99": quantile(latencies, 0.99)}


async def _paired(engine_url: str, gateway_url: str, body: dict, expected: int, rate: float,
                  duration: float) -> tuple[dict, dict, list[float]]:
    """One open-loop schedule of `rate` requests per second in all: at each
    tick one request goes straight to the engine and one through the gateway, so both meet the same
    engine state (usually the same engine step). Returns both summaries and, per pair where both
    answered the `expected` status, the gateway's latency minus the direct one."""
    for url in (engine_url, gateway_url):  # warm connections and the engine
        await send_at_rate(url + "/v1/completions", body, 10, 10.0)
    n = max(1, int(rate * duration / 2))
    direct, via = await asyncio.gather(send_at_rate(engine_url + "/v1/completions", body, n, rate / 2),
                                       send_at_rate(gateway_url + "/v1/completions", body, n, rate / 2))
    added = [v.latency - d.latency for d, v in zip(direct, via, strict=True) if d.status == v.status == expected]
    return _summary(direct, expected), _summary(via, expected), added


def histogram_buckets(metrics_text: str, name: str = "floodway_gateway_added_latency_seconds"
                      ) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of an unlabelled histogram."""
    buckets = []
    for line in metrics_text.splitlines():
        if line.startswith(name + "_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    return buckets


def bucket_quantile(before: list, after: list, q: float) -> float:
    """Upper bound of the bucket holding quantile q of the observations made between two scrapes."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before, strict=True)]
    total = counts[-1][1] if counts else 0
    return next((le for le, c in counts if total and c >= q * total), float("nan"))


def _wait_idle(engine_url: str, timeout_s: float = 300.0) -> None:
    """Until the engine runs and queues nothing, so that one phase's backlog never lands in the next."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        load = parse_engine_load(httpx.get(engine_url + "/metrics", timeout=30).text)
        if load["waiting"] + load["running"] == 0:
            return
        time.sleep(0.2)  # poll interval; the deadline bounds the wait
    raise RuntimeError(f"engine {engine_url} still busy after {timeout_s}s")


def _row(name: str, r: dict) -> str:
    return (f"{name:<18} {r['sent']:>6} {r['ok']:>6} {r['failed']:>6} {r['throughput']:>8.1f} "
            f"{r['p50'] * 1000:>9.2f} {r['p99'] * 1000:>9.2f}")


def _compare(engine: procs.Proc, gateway: procs.Proc, workload: str, body: dict, expected: int, rate: float,
             duration: float) -> list[str]:
    _wait_idle(engine.url)
    before, cpu_before = histogram_buckets(httpx.get(gateway.url + "/metrics").text), gateway.cpu_seconds()
    started = time.monotonic()
    direct, via, added = asyncio.run(_paired(engine.url, gateway.url, body, expected, rate, duration))
    after, cpu = histogram_buckets(httpx.get(gateway.url + "/metrics").text), gateway.cpu_seconds() - cpu_before
    return [f"-- {workload}: {rate:g} req/s in all for {duration:g} s (pairs: one direct, one via the gateway)",
            _row("direct", direct), _row("via gateway", via),
            f"{'difference':<18} {'':>6} {'':>6} {'':>6} {via['throughput'] / direct['throughput']:>7.2f}x "
            f"{(via['p50'] - direct['p50']) * 1000:>9.2f} {(via['p99'] - direct['p99']) * 1000:>9.2f}",
            f"{'added, paired':<18} {len(added):>6} {'':>6} {'':>6} {'':>8} {quantile(added, 0.5) * 1000:>9.2f} "
            f"{quantile(added, 0.99) * 1000:>9.2f}",
            f"gateway in-process (received -> sent upstream): p50 <= {bucket_quantile(before, after, 0.5) * 1000:.2f}"
            f" ms, p99 <= {bucket_quantile(before, after, 0.99) * 1000:.2f} ms (bucket bounds); gateway CPU "
            f"{cpu:.2f} s over {time.monotonic() - started:.1f} s, {cpu / via['sent'] * 1000:.2f} ms per request "
            "(warm-up and scrapes included)"]


def run_bench(rates: list[float], duration: float, model: str, max_tokens: int) -> str:
    if not rates or min(rates) <= 0 or duration <= 0 or max_tokens < 1:
        raise ValueError("rates and duration must be > 0 and max_tokens >= 1")
    with tempfile.TemporaryDirectory(prefix="floodway-bench-gw-") as tmp:
        engine_port, gateway_port = procs.free_port(), procs.free_port()
        engine = procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", model, "--port", str(engine_port),
                                                    "--host", "127.0.0.1", "--log-level", "warning"],
                             engine_port, timeout_s=300, log_path=os.path.join(tmp, "engine.log"))
        gateway = None
        try:
            config_path = os.path.join(tmp, "gateway.yaml")
            with open(config_path, "w") as f:
                yaml.safe_dump({"host": "127.0.0.1", "port": gateway_port, "backends": {"static": [engine.url]}}, f)
            gateway = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", config_path, "--log-level", "warning"],
                                  gateway_port, timeout_s=60, log_path=os.path.join(tmp, "gateway.log"))
            served = httpx.get(engine.url + "/v1/models").json()["data"][0]["id"]
            generate = {"model": served, "prompt": "The quick brown fox", "max_tokens": max_tokens, "temperature": 0}
            workloads = [  # the second isolates the request path: the engine's HTTP layer answers, no model step
                (f"generation, max_tokens={max_tokens}", generate, 200),
                ("request path only (unknown model: the engine answers 404 before any model step)",
                 {**generate, "model": "no-such-model"}, 404)]
            rows = [f"gateway bench: model {model}, one engine, open-loop client; latency of requests answered "
                    "as expected (ok)",
                    f"{'path':<18} {'sent':>6} {'ok':>6} {'failed':>6} {'req/s':>8} {'p50 ms':>9} {'p99 ms':>9}"]
            for workload, body, expected in workloads:
                for rate in rates:
                    rows += _compare(engine, gateway, workload, body, expected, rate, duration)
        finally:
            if gateway is not None:
                gateway.stop()
            engine.stop()
    return "\n".join(rows)
