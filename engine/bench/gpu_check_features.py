"""The GPU check's engine-feature rows (issues 35, 36, 37), on one model shape, output tokens/s at each concurrency
(closed loop, greedy; the benches' own code in engine/bench, `floodway bench engine --workload spec|lora`):

- quantized weights: the float model served with --quantization int8 and int4, and written as a GGUF Q4_1 file
  (by the `gguf` package: without it, that row says so) served as it ships, against the float weights;
- speculative decoding: n-gram speculation against none, on input-grounded and free chat requests;
- LoRA: requests spread over 16 adapters of rank 16 against the base model.

Every engine has prefix caching off (each row repeats the same prompts) and a fixed KV pool that holds every
sequence at full length (two engines are resident at once, so neither may size its pool from the GPU's free
memory). A section that fails says why in its table and fails the check, and the others still run.
"""

import gc
import pathlib
import time
import traceback
from dataclasses import dataclass, field

import torch

MAX_MODEL_LEN = 512  # the benches' default
ADAPTERS, RANK = 16, 16  # issue 37's target: 16 adapters of rank 16


@dataclass
class QuantRow:
    name: str
    kernel: str = ""  # the merged q/k/v linear's
    tps: dict[int, float] = field(default_factory=dict)  # concurrency -> output tok/s
    error: str | None = None  # why it failed
    skipped: str | None = None  # why it was not measured


def dtype_for(device: str, dtype: str) -> str:
    """The features' dtype: the run's, but bfloat16 on a CPU, where quantized weights compute in it only (one
    float baseline for every row)."""
    return "bfloat16" if device == "cpu" else dtype


def kv_blocks(concurrency: tuple[int, ...], block_size: int) -> int:
    """A pool that holds the most concurrent sequences at MAX_MODEL_LEN, plus a block each for speculation's
    lookahead (pure)."""
    return max(concurrency) * (MAX_MODEL_LEN // block_size + 1)


REQUESTS = "max(4, 2 x concurrency)"


def requests(c: int) -> int:
    """Requests per cell of the quantized rows (REQUESTS): the spec bench's default."""
    return max(4, 2 * c)


def quant_table(rows: list[QuantRow], concurrency: tuple[int, ...], float_name: str) -> list[str]:
    """Markdown: each format's tok/s at each concurrency and its ratio to the float row (the first) (pure)."""
    lines = [f"| weights | q/k/v kernel | {' | '.join(f'concurrency {c} tok/s' for c in concurrency)} |",
             "|---|---|" + "---|" * len(concurrency)]
    base = rows[0].tps
    for r in rows:
        if r.error or r.skipped:
            lines.append(f"| {r.name} | - | {' | '.join('-' for _ in concurrency)} |")
            continue
        cells = [f"{r.tps[c]:,.1f}" + (f" (**{r.tps[c] / base[c]:.2f}x** {float_name})"
                                        if r is not rows[0] and base.get(c) else "") for c in concurrency]
        lines.append(f"| {r.name} | {r.kernel} | {' | '.join(cells)} |")
    notes = [f"{r.name}: {r.error or r.skipped}" for r in rows if r.error or r.skipped]
    return lines + ([""] + notes if notes else [])


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _error(e: BaseException) -> str:
    return f"failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"


def gguf_file(folder: str, out: pathlib.Path) -> str | None:
    """The folder's model as a Q4_1 GGUF file, or None where the `gguf` package is missing."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        return None
    from floodway.engine.bench.gguf_export import write_gguf

    write_gguf(folder, out, "Q4_1")
    return str(out)


def quantized(plain, settings: dict, folder: str, tmp: pathlib.Path, concurrency: tuple[int, ...],
              max_tokens: int, say, device: torch.device) -> list[QuantRow]:
    """The float engine `plain` and the quantized formats in turn, each at every concurrency."""
    from floodway.engine.bench.lora import run_once
    from floodway.engine.bench.speculative import prompts
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    def measure(row: QuantRow, engine) -> None:
        row.kernel = engine.runner.linear_kernels.get("qkv", "")
        run_once(engine, prompts(engine.tokenizer, "chat", 2), [None], 2, 4, "warm")
        for c in concurrency:
            reqs = prompts(engine.tokenizer, "chat", requests(c))
            row.tps[c] = run_once(engine, reqs, [None], c, max_tokens, f"{row.name}{c}").wall
            say(f"  {row.name}, concurrency {c}: {row.tps[c]:,.1f} tok/s")

    float_row = QuantRow(settings["dtype"])
    measure(float_row, plain)
    rows = [float_row]
    formats = [("int8", dict(quantization="int8")), ("int4", dict(quantization="int4")), ("GGUF Q4_1", None)]
    for name, extra in formats:
        row = QuantRow(name)
        rows.append(row)
        try:
            if extra is None:
                started = time.perf_counter()
                path = gguf_file(folder, tmp / "model.Q4_1.gguf")
                if path is None:
                    row.skipped = ("not measured: the gguf package, which writes the file, is not installed (carry "
                                   "its wheel to measure it)")
                    say(f"  {name}: {row.skipped}")
                    continue
                say(f"  {name}: file written in {time.perf_counter() - started:.0f} s")
                extra = dict(model=path, tokenizer=folder, quantization="gguf")
            measure(row, LLMEngine(EngineConfig(**{**settings, **extra})))
        except Exception as e:  # noqa: BLE001 - reported in the table; the other rows still run
            row.error = _error(e)
            say(f"  {name}: {row.error}", traceback.format_exc())
        _free(device)
    return rows


def run(folder: str, prof_device: str, dtype: str, concurrency: tuple[int, ...], max_tokens: int, tmp: pathlib.Path,
        say) -> tuple[list[str], list[str]]:
    """The three sections on the model in `folder`: (their markdown, the names of those that failed)."""
    from floodway.engine.bench import lora as lora_bench
    from floodway.engine.bench import speculative
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    device = torch.device(prof_device)
    settings = dict(model=folder, dtype=dtype, device=prof_device, max_model_len=MAX_MODEL_LEN,
                    max_num_seqs=max(concurrency), num_kv_blocks=kv_blocks(concurrency, EngineConfig().block_size),
                    enable_prefix_caching=False)
    plain = LLMEngine(EngineConfig(**settings))
    lines: list[str] = []
    failed: list[str] = []

    def section(title: str) -> None:
        say("", f"## {title}")
        lines.extend(["", f"### {title}", ""])

    def echo(line: str) -> None:  # a bench's line, into the report and the tables
        say("  " + line.replace("\n", "\n  "))
        lines.append(line)

    started = time.perf_counter()
    section(f"Quantized weights (output tok/s, {max_tokens} new tokens per request, requests per cell {REQUESTS})")
    rows = quantized(plain, settings, folder, tmp, concurrency, max_tokens, say, device)
    lines.extend(quant_table(rows, concurrency, dtype))
    failed += [f"quantized {r.name}" for r in rows if r.error]
    say(f"  ({time.perf_counter() - started:.0f} s for the quantized rows)")
    # (title, the engine's settings beside the float one's, the bench's table for that engine against plain)
    benches = [("Speculative decoding (n-gram)", dict(speculative_config=speculative.NGRAM),
                lambda spec: speculative.compare(plain, spec, plain.tokenizer, list(concurrency), max_tokens, None,
                                                 echo, rounds=1)),
               (f"LoRA ({ADAPTERS} adapters of rank {RANK})", dict(enable_lora=True, max_loras=ADAPTERS,
                                                                   max_lora_rank=RANK),
                lambda lora: lora_bench.compare(plain, lora, RANK, list(concurrency), max_tokens, None, echo,
                                                counts=(ADAPTERS,)))]
    for title, extra, measure in benches:
        started = time.perf_counter()
        section(title)
        try:
            measure(LLMEngine(EngineConfig(**settings, **extra)))
        except Exception as e:  # noqa: BLE001 - reported in the table; the other sections still run
            echo(_error(e))
            say(traceback.format_exc())
            failed.append(title)
        _free(device)
        say(f"  ({time.perf_counter() - started:.0f} s for {title})")
    return lines, failed  # the caller frees the float engine's memory once this frame is gone
