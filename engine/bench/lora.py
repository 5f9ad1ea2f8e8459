"""LoRA, side by side: the base model alone (on an engine without LoRA, and on the LoRA engine) against requests
spread uniformly over 1, 4 and 16 adapters (round robin), at each concurrency, greedy, closed loop (a finished request
is replaced by the next), in alternating rounds; output tokens per second and the ratio to the base model on the
engine without LoRA.
Also the time to read one adapter from disk into the CPU cache and to copy it into a weight slot.

The adapters are random PEFT folders of the given rank on every projection, written to a temporary folder.
"""

import json
import pathlib
import tempfile
import time
from dataclasses import dataclass

from floodway.engine.bench.systems import Clock
from floodway.engine.sampling_params import SamplingParams

PROJECTIONS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
ADAPTER_COUNTS = (1, 4, 16)


def write_adapter(folder: pathlib.Path, geometry, rank: int, seed: int) -> str:
    """A random PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) for our decoder's geometry."""
    import torch
    from floodway.engine.lora.peft_format import TARGETS
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(geometry.num_layers):
        for module, names in PROJECTIONS.items():
            for name in names:
                linear, part = TARGETS[name]
                n_in, outs = geometry.linears[linear]
                key = f"base_model.model.model.layers.{layer}.{module}.{name}"
                tensors[f"{key}.lora_A.weight"] = torch.randn(rank, n_in, generator=g) / n_in ** 0.5
                tensors[f"{key}.lora_B.weight"] = torch.randn(outs[part], rank, generator=g) * 0.01
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                                                            "target_modules": [n for v in PROJECTIONS.values()
                                                                               for n in v]}))
    return str(folder)


@dataclass(frozen=True)
class Rate:
    wall: float  # output tokens per second
    cpu: float  # per second of this process's CPU time: steadier than wall time on a shared machine (--threads 1)


def run_once(engine, reqs: list[list[int]], loras: list[str | None], concurrency: int, max_tokens: int,
             tag: str) -> Rate:
    """Output tokens per second; request i runs with loras[i % len(loras)]."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    pending, inflight, tokens = list(enumerate(reqs)), 0, 0
    clock = Clock()
    while pending or engine.has_unfinished_requests():
        while pending and inflight < concurrency:
            i, p = pending.pop(0)
            engine.add_request(f"{tag}-{i}", p, params, lora=loras[i % len(loras)])
            inflight += 1
        for out in engine.step():
            tokens += len(out.new_token_ids)
            inflight -= out.finished
    seconds, cpu = clock.stop()
    return Rate(tokens / seconds, tokens / cpu)


def load_times(engine, paths: list[str]) -> tuple[float, float]:
    """Median seconds to read an adapter folder (config, safetensors, slot layout) and to copy it into a slot."""
    lora = engine.lora
    reads, copies = [], []
    for path in paths:
        t = time.perf_counter()
        weights = lora.read(path)
        reads.append(time.perf_counter() - t)
        t = time.perf_counter()
        lora.slots.load(0, weights)
        copies.append(time.perf_counter() - t)
    return sorted(reads)[len(reads) // 2], sorted(copies)[len(copies) // 2]


def _mean(rates: list[Rate]) -> Rate:
    """The rounds' rate: their tokens (the same each round: the same requests, to max_tokens) over their summed time."""
    return Rate(len(rates) / sum(1 / r.wall for r in rates), len(rates) / sum(1 / r.cpu for r in rates))


def compare(plain, lora, rank: int, concurrency: list[int], max_tokens: int, num_requests: int | None, echo,
            counts: tuple[int, ...] = ADAPTER_COUNTS, rounds: int = 1) -> None:
    """Writes max(counts) random adapters of `rank` for the LoRA engine (its --max-loras at least that many), times
    their load and echoes the table: at each concurrency the base model on both engines and requests spread over each
    count of adapters, every cell `rounds` times, the cells' order reversed every other round; a rate is the rounds'
    tokens over their time, and the range of each round's ratio to that round's base is printed beside it (one
    engine's rate drifts by 5-10% from run to run on a shared machine)."""
    from floodway.engine.bench.speculative import prompts
    from floodway.engine.lora.peft_format import geometry_of

    n_adapters = max(counts)
    with tempfile.TemporaryDirectory(prefix="floodway-bench-lora-") as tmp:  # read again if the CPU cache evicts
        paths = [write_adapter(pathlib.Path(tmp) / f"a{i}", geometry_of(lora.runner.model), rank, i)
                 for i in range(n_adapters)]
        read_s, copy_s = load_times(lora, paths)
        for i, path in enumerate(paths):
            lora.lora.load(f"a{i}", path)
        echo(f"adapters of rank {rank} on q/k/v/o/gate/up/down; greedy, {max_tokens} new tokens per request; "
             f"requests per cell: {num_requests or 'max(8, 2 x concurrency)'}; rounds: {rounds}")
        echo(f"adapter load from disk (read + check + slot layout): {read_s * 1000:.1f} ms; copy into a slot: "
             f"{copy_s * 1000:.1f} ms (median of {n_adapters})")
        warm = prompts(plain.tokenizer, "chat", n_adapters)  # every adapter in its slot before the timed cells
        run_once(plain, warm, [None], 4, 8, "warm")
        run_once(lora, warm, [f"a{i}" for i in range(n_adapters)], 4, 8, "warm")
        echo("| concurrency | rows | tok/s | x base (no LoRA engine) | x base, per CPU-second | x base, per round |\n"
             "|---|---|---|---|---|---|")
        cells = [("base, engine without LoRA", plain, [None]), ("base, LoRA engine", lora, [None])] + \
            [(f"{k} adapter{'s' if k > 1 else ''} uniformly", lora, [f"a{i}" for i in range(k)]) for k in counts]
        for c in concurrency:
            reqs = prompts(plain.tokenizer, "chat", num_requests or max(8, 2 * c))
            runs: list[list[Rate]] = [[] for _ in cells]
            for r in range(rounds):
                for i in range(len(cells))[::1 if r % 2 == 0 else -1]:
                    _, engine, loras = cells[i]
                    runs[i].append(run_once(engine, reqs, loras, c, max_tokens, f"{c}r{r}c{i}"))
            base = _mean(runs[0])
            for (label, _, _), rates in zip(cells, runs, strict=True):
                rate = _mean(rates)
                per_round = sorted(x.wall / b.wall for x, b in zip(rates, runs[0], strict=True))
                echo(f"| {c} | {label} | {rate.wall:,.1f} | {rate.wall / base.wall:.2f}x | "
                     f"{rate.cpu / base.cpu:.2f}x | {per_round[0]:.2f}-{per_round[-1]:.2f}x |")


def run(model: str, rank: int, concurrency: list[int], threads: int, dtype: str, max_model_len: int,
        max_tokens: int, num_requests: int | None, rounds: int) -> None:
    import torch
    import typer
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    if threads:
        torch.set_num_threads(threads)
    # No prefix caching: every row runs the same prompts, and an adapter's second row would hit its first's blocks.
    settings = dict(model=model, served_model_name=model, max_model_len=max_model_len, dtype=dtype,
                    max_num_seqs=max(concurrency), enable_prefix_caching=False)
    try:
        configs = [EngineConfig(**settings), EngineConfig(**settings, enable_lora=True, max_loras=max(ADAPTER_COUNTS),
                                                          max_lora_rank=rank)]
        for cfg in configs:
            cfg.validate()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    plain, lora = (LLMEngine(cfg) for cfg in configs)
    typer.echo(f"model {model}; {torch.get_num_threads()} threads, {plain.runner.device}, {plain.runner.dtype}")
    compare(plain, lora, rank, concurrency, max_tokens, num_requests, typer.echo, rounds=rounds)
