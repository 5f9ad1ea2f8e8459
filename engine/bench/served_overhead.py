"""What serving adds to a request at batch 1, side by side: `python -P -m floodway.engine.bench.served_overhead`.

The same greedy chat requests (64 new tokens, one at a time) run in this process through `LLMEngine.step` and through
our engine's server (a real process on 127.0.0.1, started as the chat bench starts it), one thread each, in
alternating rounds. CPU ms per output token, prefill included: in-process; the server's busiest thread (its engine
loop) and its other threads (HTTP, streaming). CPU time, not wall: on a shared machine other load moves the wall clock.
"""

import asyncio
import statistics
import tempfile
import time

import typer

SLOTS, MAX_MODEL_LEN = 32, 512  # as the chat bench serves


def in_process_ms(engine, prompts: list[list[int]], max_tokens: int) -> float:
    """CPU ms per output token of running prompts one after another to the end (this thread's CPU)."""
    from floodway.engine.sampling_params import SamplingParams

    start = time.thread_time()
    for ids in prompts:
        engine.add_request(f"inproc-{time.monotonic_ns()}", ids,
                           SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
        while engine.has_unfinished_requests():
            engine.step()
    return (time.thread_time() - start) * 1000 / (len(prompts) * max_tokens)


def main(model: str = "floodway/smollm2-135m-instruct", dtype: str = "bfloat16", rounds: int = 3,
         requests: int = 2, max_tokens: int = 64) -> None:
    import torch
    from floodway.engine.bench import serving
    from floodway.engine.bench.chat_load import chat_messages, closed_loop
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=model, dtype=dtype, max_num_seqs=SLOTS, max_model_len=MAX_MODEL_LEN))
    tok = engine.tokenizer

    def prompts(first: int) -> list[list[int]]:  # as the server renders a plain chat request
        return [tok.encode(tok.apply_chat_template(chat_messages(i), add_generation_prompt=True, tokenize=False),
                           add_special_tokens=False) for i in range(first, first + requests)]

    rows = []
    with tempfile.TemporaryDirectory(prefix="floodway-bench-") as logs:
        servers = []
        try:
            serving.start_servers(servers, model, [], SLOTS, 1, dtype, MAX_MODEL_LEN, None, logs)
            proc = servers[0][1]
            asyncio.run(closed_loop(proc.url, serving.SERVED, 1, 2, max_tokens, first_id=10**6))  # warm-up, both
            in_process_ms(engine, prompts(10**6), max_tokens)
            for r in range(rounds):
                first = 1000 + r * requests
                ours = in_process_ms(engine, prompts(first), max_tokens)
                before = serving.thread_cpu_seconds(proc.pid)
                asyncio.run(closed_loop(proc.url, serving.SERVED, 1, requests, max_tokens, first_id=first))
                busiest, others = serving.busiest_and_others(before, serving.thread_cpu_seconds(proc.pid))
                n = requests * max_tokens
                rows.append((ours, busiest * 1000 / n, others * 1000 / n))
                typer.echo(f"round {r}: in-process {rows[-1][0]:.1f}, served engine loop {rows[-1][1]:.1f} + other "
                           f"threads {rows[-1][2]:.2f} CPU ms/token", err=True)
        finally:
            for _, p in servers:
                p.stop(grace_s=10)
    typer.echo(render(rows, requests, max_tokens))


def render(rows: list[tuple[float, float, float]], requests: int, max_tokens: int) -> str:
    """A markdown table of each round and the medians, served over in-process (pure)."""
    lines = [f"batch 1, {requests} requests of {max_tokens} tokens a round; CPU ms per output token", "",
             "| round | in-process | served: engine loop | served: other threads | served total over in-process |",
             "|---|---|---|---|---|"]
    median = tuple(statistics.median(col) for col in zip(*rows, strict=True)) if rows else None
    for name, (ours, loop, others) in [*((str(i), row) for i, row in enumerate(rows)),
                                       *([("median", median)] if median else [])]:
        lines.append(f"| {name} | {ours:.1f} | {loop:.1f} | {others:.2f} | {(loop + others) / ours:.3f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    typer.run(main)
