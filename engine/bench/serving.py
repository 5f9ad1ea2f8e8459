"""The served chat benchmark (`floodway bench engine --workload chat`): our engine's server, llama.cpp's
llama-server and vLLM's CPU build on the same weights, each a real process on 127.0.0.1 with the same thread count,
driven by the same closed-loop streamed chat load at each concurrency in turn; every system runs the same requests.

All servers start before the first measurement and idle while another is measured, so one run compares them under
the same machine conditions; the servers' own CPU seconds are reported too (a shared machine's load moves wall
clock, not CPU time), split per output token into the busiest thread's (the step loop) and the rest's (HTTP and
streaming: what serving adds to the steps).
"""

import asyncio
import functools
import json
import os
import tempfile
import time

import typer
from floodway.engine.bench import llamacpp, vllm
from floodway.engine.bench.chat_load import LoadResult, chat_messages, closed_loop
from floodway.engine.bench.speculative import NGRAM, messages
from floodway.engine.models.smollm2 import NAME
from floodway.operator import procs

SERVED = "bench-model"
# name -> which SmolLM2 GGUF llama-server serves; "-lookup": with its prompt-lookup decoding on, from the same
# --speculative-config as floodway-spec (the operator's rendering of engine.speculative for runtime llamacpp).
BASELINES = {"llamacpp": "BF16", "llamacpp-q4_1": "Q4_1", "llamacpp-q8_0": "Q8_0", "llamacpp-q4_k_m": "Q4_K_M",
             "llamacpp-lookup": "BF16", "llamacpp-q4_1-lookup": "Q4_1"}


def _file(kind: str) -> list[str]:
    """Our engine's flags for one of SmolLM2's GGUF files (llamacpp.smollm2_gguf)."""
    return ["--model", llamacpp.smollm2_gguf(kind), "--tokenizer", NAME, "--dtype", "bfloat16"]


# Our engine with these flags, beside the default one; each weight format (--quantization, or a GGUF file) is one.
VARIANTS = {"floodway-compile-decode": lambda: ["--compile-decode"],
            "floodway-fp32": lambda: ["--dtype", "float32", "--quantization", "none"],
            "floodway-bf16": lambda: ["--dtype", "bfloat16", "--quantization", "none"],
            "floodway-q4_1": lambda: ["--dtype", "bfloat16", "--quantization", "gguf"],
            "floodway-q8_0": lambda: _file("Q8_0"), "floodway-q4_k_m": lambda: _file("Q4_K_M"),
            "floodway-int8": lambda: ["--dtype", "bfloat16", "--quantization", "int8"],
            "floodway-int4": lambda: ["--dtype", "bfloat16", "--quantization", "int4"]}
SPEC = "-spec"  # suffix of "floodway" or a variant: the same with the --speculative-config


def ours(name: str) -> bool:
    """Whether a baseline name is our engine: a variant, or it or "floodway" with SPEC."""
    return name != "floodway" and name.removesuffix(SPEC) in {*VARIANTS, "floodway"}


def variant_flags(name: str, speculative_config: str) -> list[str]:
    """Our engine's extra flags for one of our baselines: floodway-spec is the default engine with speculation,
    floodway-bf16-spec that variant with it."""
    base = name.removesuffix(SPEC)
    spec = ["--speculative-config", speculative_config] if base != name else []
    return (VARIANTS[base]() if base in VARIANTS else []) + spec


# --prompts: (messages, ignore_eos). A grounded answer ends where its copy does: past its EOS the model writes free
# text, which measures chat (served with ignore_eos, acceptance fell from 71% to 58%).
PROMPTS = {"chat": (chat_messages, True), "grounded": (functools.partial(messages, "grounded"), False)}
VLLM = "vllm"  # vLLM's CPU build (e2e/vllm/build.sh) on our engine's folder of weights
BATCH_TOKENS = 2048  # each server's token budget per step (our engine's default)


def cpu_list(text: str) -> set[int]:
    """The CPUs of a taskset-style list ("1", "0,2", "2-3") (pure); ValueError on anything else."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    if not cpus or min(cpus) < 0:
        raise ValueError(f"not a CPU list: {text!r}")
    return cpus


def start_servers(servers: list[tuple[str, procs.Proc]], model: str, baselines: list[str], slots: int, threads: int,
           dtype: str, max_model_len: int, llama_server: str | None, logs: str,
           ready_s: dict[str, float] | None = None, vllm_python: str | None = None,
           speculative_config: str = NGRAM, cpus: set[int] | None = None) -> None:
    """Starts each server and appends it to `servers` as soon as it runs (so a later failure still stops it);
    `ready_s` gets each one's seconds from its start to ready. `cpus`: each server and every process it starts
    run on these CPUs only (taskset; the children inherit it)."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    ready_s = {} if ready_s is None else ready_s
    pin = ["taskset", "--cpu-list", ",".join(map(str, sorted(cpus)))] if cpus else []

    def add(name: str, argv: list[str], port: int, path: str, timeout_s: float, env: dict | None = None,
            log: str | None = None) -> None:
        began = time.perf_counter()
        servers.append((name, procs.start(pin + argv, port, path, timeout_s=timeout_s, env=env,
                                          log_path=f"{logs}/{log or name.replace(' ', '-')}.log")))
        ready_s[name] = time.perf_counter() - began

    for name, extra in [("floodway engine", []),
                        *((v, variant_flags(v, speculative_config)) for v in baselines if ours(v))]:
        port = procs.free_port()
        argv = procs.FLOODWAY_ARGV + ["engine", "--model", model, "--served-model-name", SERVED, "--dtype", dtype,
                                      "--max-num-seqs", str(slots), "--max-model-len", str(max_model_len),
                                      "--max-num-batched-tokens", str(BATCH_TOKENS), "--host", "127.0.0.1",
                                      "--port", str(port), "--log-level", "warning", *extra]
        add(name, argv, port, "/ready", 600, env)
    llama = [b for b in baselines if b in BASELINES]
    if llama:
        binary = llamacpp.server_binary(llama_server)
        for name in llama:
            port = procs.free_port()
            lookup = json.loads(speculative_config) if name.endswith("-lookup") else None
            argv = llamacpp.server_argv(binary, llamacpp.smollm2_gguf(BASELINES[name]), SERVED, port, slots,
                                        max_model_len, threads, BATCH_TOKENS, lookup)
            add(f"llama-server {BASELINES[name].lower()}{' lookup' if lookup else ''}", argv, port, "/health", 300,
                log=name)
    if VLLM in baselines:
        port = procs.free_port()
        spec = vllm.spec(model, SERVED, dtype, slots, max_model_len, BATCH_TOKENS)
        argv = vllm.server_argv(vllm.python(vllm_python), spec, port)
        add(VLLM, argv, port, "/health", 1200, vllm.server_env(threads, cpus))


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (Linux's /proc children lists; vLLM runs its engine in a child process)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):  # the thread ended
                pass
    return found


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """Each thread's CPU seconds by thread id, over the process and its descendants (Linux's /proc schedstat, in
    ns; empty where it is missing)."""
    out = {}
    for p in process_tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    out[tid] = int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):  # the thread ended, or no schedstat
                pass
    return out


def peak_rss_bytes(pid: int) -> int:
    """Each process's peak resident memory (VmHWM), summed over the process and its descendants."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
        except (OSError, ValueError):
            pass
    return total


def busiest_and_others(before: dict[str, float], after: dict[str, float]) -> tuple[float, float] | None:
    """CPU seconds between two thread_cpu_seconds readings: the busiest thread's, and all others' together (pure)."""
    used = [cpu - before.get(tid, 0.0) for tid, cpu in after.items()]
    return (max(used), sum(used) - max(used)) if used else None


def run(model: str, baselines: list[str], concurrencies: list[int], threads: int, dtype: str, max_model_len: int,
        max_tokens: int, num_requests: int | None, llama_server: str | None, vllm_python: str | None = None,
        prompts: str = "chat", speculative_config: str = NGRAM, cpus: str | None = None,
        temperature: float = 0.0) -> None:
    unknown = [b for b in baselines if b not in BASELINES and not ours(b) and b != VLLM]
    if unknown:
        raise typer.BadParameter(f"unknown baseline(s) {unknown} for the chat workload; choose from "
                                 f"{[*BASELINES, *VARIANTS, VLLM]}, or floodway or one of ours with {SPEC}")
    if prompts not in PROMPTS:
        raise typer.BadParameter(f"unknown prompts {prompts!r}; choose from {list(PROMPTS)}")
    messages_of, ignore_eos = PROMPTS[prompts]
    try:
        pinned = cpu_list(cpus) if cpus else None
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    client = os.sched_getaffinity(0) - (pinned or set())
    if not client:
        raise typer.BadParameter(f"--cpus {cpus} leaves no CPU for the load client")
    from floodway.engine.models.smollm2 import NAME

    if any(b in BASELINES for b in baselines) and model != NAME:
        raise typer.BadParameter(f"the llama-server baselines serve {NAME}'s GGUF: use --model {NAME}")
    if VLLM in baselines:  # vLLM reads a folder: every server gets the same one (ours would take a GGUF as is)
        from floodway.engine.models.builtin import resolve_model

        model = resolve_model(model)
    rows: list[tuple[int, str, LoadResult]] = []
    ready_s: dict[str, float] = {}
    peak_rss: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="floodway-bench-") as logs:
        servers: list[tuple[str, procs.Proc]] = []
        try:
            start_servers(servers, model, baselines, max(concurrencies), threads, dtype, max_model_len, llama_server,
                          logs, ready_s, vllm_python, speculative_config, pinned)
            os.sched_setaffinity(0, client)  # the load client off the servers' CPUs
            for _, proc in servers:  # warm-up: first-request costs (and batch 1's and 2's compiles) stay out
                for c in (1, 2):
                    asyncio.run(closed_loop(proc.url, SERVED, c, 2, 8, first_id=10**6 + 10 * c))
            first = 0
            for c in concurrencies:
                n = num_requests or max(8, 4 * c)
                for name, proc in servers:
                    per_thread = thread_cpu_seconds(proc.pid)
                    result = asyncio.run(closed_loop(proc.url, SERVED, c, n, max_tokens, first_id=first,
                                                     messages=messages_of, ignore_eos=ignore_eos,
                                                     temperature=temperature))
                    result.thread_cpu_seconds = busiest_and_others(per_thread, thread_cpu_seconds(proc.pid))
                    result.cpu_seconds = sum(result.thread_cpu_seconds) if result.thread_cpu_seconds else None
                    rows.append((c, name, result))
                    typer.echo(f"concurrency {c}, {name}: {result.tokens_per_s:.1f} tok/s", err=True)
                first += n
            peak_rss.update((name, peak_rss_bytes(proc.pid)) for name, proc in servers)
        finally:
            for _, proc in servers:
                proc.stop(grace_s=10)
    typer.echo(render(model, dtype, threads, max_tokens, rows, ready_s, peak_rss, prompts, temperature))


def render(model: str, dtype: str, threads: int, max_tokens: int, rows: list[tuple[int, str, LoadResult]],
           ready_s: dict[str, float] | None = None, peak_rss: dict[str, int] | None = None,
           prompts: str = "chat", temperature: float = 0.0) -> str:
    """A markdown table, each concurrency's systems side by side with ours over each, then each server's seconds
    from start to ready and peak resident memory (pure)."""
    sampled = f"sampled at temperature {temperature:g}" if temperature else "greedy"
    lines = [f"model: {model} ({dtype} in our engine), {threads or 'default'} thread(s) per server, {prompts} "
             f"requests of {'' if PROMPTS[prompts][1] else 'up to '}{max_tokens} new tokens, {sampled}, closed loop",
             "",
             "| concurrency | system | output tok/s | floodway x | TTFT p50 ms | floodway TTFT x | TTFT p99 ms "
             "| tok/CPU-s | CPU ms/tok: busiest thread + others | requests | seconds | ITL p50 ms | ITL p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
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
                     f"| {r.ttft_ms(0.99):.0f} | {per_cpu} | {split} | {len(r.ttfts)}{short} | {r.seconds:.1f} "
                     f"| {r.itl_ms(0.5):.1f} | {r.itl_ms(0.99):.1f} |")
    if ready_s:
        lines += ["", "| system | start to ready s | peak RSS MB (each process's peak, summed) |", "|---|---|---|"]
        lines += [f"| {name} | {s:.1f} | {(peak_rss or {}).get(name, 0) / 2**20:.0f} |" for name, s in ready_s.items()]
    return "\n".join(lines)
