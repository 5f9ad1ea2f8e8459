"""The served chat benchmark (`floodway bench engine --workload chat`): our engine's server and llama.cpp's
llama-server on the same weights, each a real process on 127.0.0.1 with the same thread count, driven by the same
closed-loop streamed chat load at each concurrency in turn; every system runs the same requests.

All servers start before the first measurement and idle while another is measured, so one run compares them under
the same machine conditions; the servers' own CPU seconds are reported too (a shared machine's load moves wall
clock, not CPU time), split per output token into the busiest thread's (the step loop) and the rest's (HTTP and
streaming: what serving adds to the steps).
"""

import asyncio
import os
import tempfile

import typer
from floodway.engine.bench import llamacpp
from floodway.engine.bench.chat_load import LoadResult, closed_loop
from floodway.operator import procs

SERVED = "bench-model"
BASELINES = {"llamacpp": "bf16", "llamacpp-q4_1": "q4_1"}  # name -> which SmolLM2 GGUF
VARIANTS = {"floodway-compile-decode": ["--compile-decode"]}  # our engine with these flags, beside the default one
BATCH_TOKENS = 2048  # each server's token budget per step (our engine's default)


def start_servers(servers: list[tuple[str, procs.Proc]], model: str, baselines: list[str], slots: int, threads: int,
           dtype: str, max_model_len: int, llama_server: str | None, logs: str) -> None:
    """Starts each server and appends it to `servers` as soon as it runs (so a later failure still stops it)."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    for name, extra in [("floodway engine", []), *((v, VARIANTS[v]) for v in baselines if v in VARIANTS)]:
        port = procs.free_port()
        ours = procs.FLOODWAY_ARGV + ["engine", "--model", model, "--served-model-name", SERVED, "--dtype", dtype,
                                      "--max-num-seqs", str(slots), "--max-model-len", str(max_model_len),
                                      "--max-num-batched-tokens", str(BATCH_TOKENS), "--host", "127.0.0.1",
                                      "--port", str(port), "--log-level", "warning", *extra]
        servers.append((name, procs.start(ours, port, "/ready", timeout_s=600, env=env,
                                          log_path=f"{logs}/{name.replace(' ', '-')}.log")))
    llama = [b for b in baselines if b in BASELINES]
    if llama:
        binary, ggufs = llamacpp.server_binary(llama_server), llamacpp.smollm2_ggufs()
        for name in llama:
            port = procs.free_port()
            argv = llamacpp.server_argv(binary, ggufs[BASELINES[name]], SERVED, port, slots, max_model_len, threads,
                                        BATCH_TOKENS)
            servers.append((f"llama-server {BASELINES[name]}",
                            procs.start(argv, port, "/health", timeout_s=300, log_path=f"{logs}/{name}.log")))


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """Each thread's CPU seconds by thread id (Linux's /proc schedstat, in ns; empty where it is missing)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread ended, or no schedstat
            pass
    return out


def busiest_and_others(before: dict[str, float], after: dict[str, float]) -> tuple[float, float] | None:
    """CPU seconds between two thread_cpu_seconds readings: the busiest thread's, and all others' together (pure)."""
    used = [cpu - before.get(tid, 0.0) for tid, cpu in after.items()]
    return (max(used), sum(used) - max(used)) if used else None


def run(model: str, baselines: list[str], concurrencies: list[int], threads: int, dtype: str, max_model_len: int,
        max_tokens: int, num_requests: int | None, llama_server: str | None) -> None:
    unknown = [b for b in baselines if b not in BASELINES and b not in VARIANTS]
    if unknown:
        raise typer.BadParameter(f"unknown baseline(s) {unknown} for the chat workload; choose from "
                                 f"{[*BASELINES, *VARIANTS]}")
    from floodway.engine.models.smollm2 import NAME

    if any(b in BASELINES for b in baselines) and model != NAME:
        raise typer.BadParameter(f"the llama-server baselines serve {NAME}'s GGUF: use --model {NAME}")
    rows: list[tuple[int, str, LoadResult]] = []
    with tempfile.TemporaryDirectory(prefix="floodway-bench-") as logs:
        servers: list[tuple[str, procs.Proc]] = []
        try:
            start_servers(servers, model, baselines, max(concurrencies), threads, dtype, max_model_len, llama_server,
                          logs)
            for _, proc in servers:  # warm-up: first-request costs (and batch 1's and 2's compiles) stay out
                for c in (1, 2):
                    asyncio.run(closed_loop(proc.url, SERVED, c, 2, 8, first_id=10**6 + 10 * c))
            first = 0
            for c in concurrencies:
                n = num_requests or max(8, 4 * c)
                for name, proc in servers:
                    cpu, per_thread = proc.cpu_seconds(), thread_cpu_seconds(proc.pid)
                    result = asyncio.run(closed_loop(proc.url, SERVED, c, n, max_tokens, first_id=first))
                    result.cpu_seconds = proc.cpu_seconds() - cpu
                    result.thread_cpu_seconds = busiest_and_others(per_thread, thread_cpu_seconds(proc.pid))
                    rows.append((c, name, result))
                    typer.echo(f"concurrency {c}, {name}: {result.tokens_per_s:.1f} tok/s", err=True)
                first += n
        finally:
            for _, proc in servers:
                proc.stop(grace_s=10)
    typer.echo(render(model, dtype, threads, max_tokens, rows))


def render(model: str, dtype: str, threads: int, max_tokens: int, rows: list[tuple[int, str, LoadResult]]) -> str:
    """A markdown table, each concurrency's systems side by side with ours over each (pure)."""
    lines = [f"model: {model} ({dtype} in our engine), {threads or 'default'} thread(s) per server, chat requests "
             f"of {max_tokens} new tokens, closed loop", "",
             "| concurrency | system | output tok/s | floodway x | TTFT p50 ms | floodway TTFT x | TTFT p99 ms "
             "| tok/CPU-s | CPU ms/tok: busiest thread + others | requests | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ours: dict[int, LoadResult] = {}
    for c, name, r in rows:
        base = ours.setdefault(c, r)
        speed = base.tokens_per_s / r.tokens_per_s if r.tokens_per_s else float("nan")
        ttft = base.ttft_ms(0.5) / r.ttft_ms(0.5) if r.ttfts else float("nan")
        per_cpu = f"{r.tokens / r.cpu_seconds:.1f}" if r.cpu_seconds else "-"
        split = r.cpu_ms_per_token()
        split = f"{split[0]:.1f} + {split[1]:.1f}" if split else "-"
        short = f" ({r.short} short)" if r.short else ""
        lines.append(f"| {c} | {name} | {r.tokens_per_s:.1f} | {speed:.2f}x | {r.ttft_ms(0.5):.0f} | {ttft:.2f}x "
                     f"| {r.ttft_ms(0.99):.0f} | {per_cpu} | {split} | {len(r.ttfts)}{short} | {r.seconds:.1f} |")
    return "\n".join(lines)
