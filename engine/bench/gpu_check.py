"""The one-call GPU check (`e2e/gpu/check.sh`, issue #17): on seeded random models of real 0.5B-8B shapes (no
download), greedy parity with transformers, decode tokens/s at several batch sizes against transformers' static
batch `generate` and its continuous batching, batch-1 decode against the HBM-bandwidth bound, prefill against the
FLOP bound, and the KV blocks the engine allocated; then, on one shape, the engine's features at each concurrency
(gpu_check_features: quantized weights, speculative decoding, LoRA). Needs only torch and transformers (and the
`gguf` package for the GGUF row). `--cpu` runs the same path on tiny shapes in seconds, so it cannot rot. Exit
status 1 on a parity failure (gpu_check_parity says what that is) or a feature section that failed.
"""

import argparse
import copy
import dataclasses
import datetime
import gc
import logging
import pathlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch
from floodway.engine.bench import gpu_check_features as features
from floodway.engine.bench import gpu_check_parity as parity
from floodway.engine.bench import gpu_check_speed as speed

# Public configs' shapes: (our architecture preset, overrides). The tokenizer is the built-in one; ids past it are
# only ids (prompts are token ids).
SHAPES: dict[str, tuple[str, dict]] = {
    "qwen2-0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)),
    "llama-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True)),
    "llama-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)),
    "tiny-llama": ("llama", {}),
    # The tiny preset with an MLP width that int8/int4's groups of 32 divide (688 does not): the CPU's feature rows.
    "tiny-llama-g32": ("llama", dict(intermediate_size=512)),
    "tiny-qwen2": ("qwen2", {}),
}


@dataclass(frozen=True)
class Profile:
    device: str
    dtype: str
    models: tuple[str, ...]
    parity_prompts: int
    parity_tokens: int
    parity_lengths: tuple[int, int]  # prompt lengths drawn in this range
    batches: tuple[int, ...]
    decode_prompt: int  # prompt tokens of each decoding sequence
    decode_tokens: int  # new tokens of each
    prefill_prompts: int
    prefill_len: int
    copy_bytes: int
    matmul_n: int
    features: str  # the shape of the feature rows ("none": no feature rows)
    concurrency: tuple[int, ...]  # of the feature rows
    feature_tokens: int  # new tokens per request of the feature rows


# The feature rows on the 1B shape, 64 tokens per request and each bench's default request counts: estimated at
# about two minutes of the check's time (six engines started, 16 adapters written, the Q4_1 file quantized on the
# CPU); no GPU has run them yet.
GPU = Profile("cuda", "bfloat16", ("qwen2-0.5b", "llama-1b", "llama-8b"), 8, 64, (16, 512), (1, 8, 32, 128), 64, 128,
              16, 1024, 2 << 30, 8192, "llama-1b", (1, 8, 32), 64)
# Seconds on a loaded 2-core machine: the path, not the figures.
CPU = Profile("cpu", "float32", ("tiny-llama",), 3, 8, (8, 40), (1, 4), 8, 4, 2, 32, 64 << 20, 512, "tiny-llama-g32",
              (1, 4), 8)


@dataclass
class ModelReport:
    name: str
    shape: str
    params: int = 0
    weight_bytes: int = 0
    matmul_params: int = 0
    kv: str = ""
    parity_rows: list[parity.ParityRow] = field(default_factory=list)
    ours: dict[int, float] = field(default_factory=dict)  # batch -> output tok/s
    static: dict[int, float] = field(default_factory=dict)
    continuous: dict[int, float | str] = field(default_factory=dict)  # a figure or the error
    eager_b1: float | None = None
    prefill: float = 0.0


@dataclass
class Bounds:
    bandwidth: float  # bytes/s
    peak: float  # FLOP/s


def say(*lines: str) -> None:
    print(*lines, sep="\n", flush=True)  # flushed: a run cut by a time limit still shows what it measured


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def engine_kwargs(prof: Profile) -> dict:
    """The engine as configured by default, but for sequences enough for the largest batch."""
    return dict(dtype=prof.dtype, device=prof.device, max_num_seqs=max(prof.batches))


def has_enforce_eager() -> bool:
    from floodway.engine.config import EngineConfig

    return "enforce_eager" in {f.name for f in dataclasses.fields(EngineConfig)}


def kv_line(llm, device: torch.device) -> str:
    r, c = llm.engine.runner, llm.engine.config
    gib = r.num_blocks * r.shape.block_bytes / 2**30
    where = (f"gpu_memory_utilization {c.gpu_memory_utilization} of {torch.cuda.mem_get_info(device)[1] / 2**30:.1f} "
             "GiB" if device.type == "cuda" else "the CPU byte budget")
    return (f"{r.num_blocks} blocks of {c.block_size} tokens ({r.num_blocks * c.block_size} tokens, {gib:.2f} GiB) "
            f"from {where}")


def run_ours(path: str, prof: Profile, rep: ModelReport, prompts: list[list[int]], inject: bool,
             device: torch.device) -> list[list[int]]:
    """Our engine's figures into rep; returns its greedy tokens for the parity prompts."""
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams

    llm = LLM(path, **engine_kwargs(prof))
    vocab = llm.engine.runner.vocab_size
    rep.kv = kv_line(llm, device)
    say(f"  KV cache: {rep.kv}")
    greedy = SamplingParams(max_tokens=prof.parity_tokens, temperature=0.0, ignore_eos=True)
    # The self-test of the failure path: the first prompt's logits pushed toward one token, as a wrong kernel would.
    per = [dataclasses.replace(greedy, logit_bias={4: 100.0}) if inject and i == 0 else greedy
           for i in range(len(prompts))]
    tokens = [o.output_token_ids for o in llm.generate(prompts, per)]
    for b in prof.batches:  # compiles and captures whatever the engine does lazily, per batch size
        speed.ours(llm, speed.random_prompts(1000 + b, b, 8, vocab), 2)
    for b in prof.batches:
        rep.ours[b] = speed.ours(llm, speed.random_prompts(b, b, prof.decode_prompt, vocab), prof.decode_tokens)
        say(f"  decode batch {b}: floodway {rep.ours[b]:,.1f} tok/s")
    # Seeds apart from the decode runs' (the batch size) and each other's: no prompt hits the prefix cache.
    speed.prefill(llm, speed.random_prompts(2001, 2, prof.prefill_len, vocab))
    rep.prefill = speed.prefill(llm, speed.random_prompts(2002, prof.prefill_prompts, prof.prefill_len, vocab))
    say(f"  prefill {prof.prefill_prompts} x {prof.prefill_len} tokens: floodway {rep.prefill:,.0f} tok/s")
    del llm
    free(device)
    if has_enforce_eager():
        llm = LLM(path, enforce_eager=True, **engine_kwargs(prof))
        speed.ours(llm, speed.random_prompts(1001, 1, 8, vocab), 2)
        rep.eager_b1 = speed.ours(llm, speed.random_prompts(1, 1, prof.decode_prompt, vocab), prof.decode_tokens)
        say(f"  decode batch 1 with --enforce-eager: {rep.eager_b1:,.1f} tok/s")
        del llm
        free(device)
    else:
        say("  this engine has no --enforce-eager: no eager/graphs comparison")
    return tokens


def run_transformers(path: str, prof: Profile, rep: ModelReport, prompts: list[list[int]], ours: list[list[int]],
                     device: torch.device) -> None:
    from floodway.engine.config import EngineConfig
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, prof.dtype)).to(device).eval()
    # Parity first, on the model as loaded (continuous batching swaps its attention implementation while it runs).
    ref = model if prof.dtype == "float32" else copy.deepcopy(model).float()
    rep.parity_rows = parity.compare(ours, model, ref, prompts, prof.parity_tokens)
    say(*("  " + line for line in parity.render(rep.parity_rows, prof.dtype, prof.parity_tokens)))
    del ref
    free(device)
    vocab = model.config.vocab_size
    cb = speed.has_continuous_batching(model)
    if not cb:
        say("  this transformers has no continuous batching (continuous_batching_context_manager / generate_batch)")
    for b in prof.batches:
        batch = speed.random_prompts(b, b, prof.decode_prompt, vocab)  # the same prompts ours decoded
        rep.static[b] = speed.transformers_static(model, batch, prof.decode_tokens)
        if cb:
            rep.continuous[b] = speed.transformers_continuous(model, batch, prof.decode_tokens,
                                                              EngineConfig().max_num_batched_tokens)
        say(f"  decode batch {b}: transformers static {rep.static[b]:,.1f} tok/s, continuous "
            f"{_fmt(rep.continuous.get(b, 'n/a'))}")
    del model
    free(device)


def check_model(name: str, prof: Profile, device: torch.device, inject: bool) -> ModelReport:
    from floodway.engine.models.builtin import write_random_model

    arch, overrides = SHAPES[name]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="floodway-gpu-check-") as tmp:
        path = write_random_model(pathlib.Path(tmp) / name, arch, seed=0, device=prof.device, dtype=prof.dtype,
                                  **overrides)
        rep = ModelReport(name, describe(path))
        # Counted on the meta device: the engine's own copy may hold weights in other forms (packed on a CPU).
        skeleton = speed.skeleton(path, getattr(torch, prof.dtype))
        rep.params = sum(p.numel() for p in skeleton.parameters())
        rep.weight_bytes, rep.matmul_params = speed.weight_bytes(skeleton), speed.matmul_params(skeleton)
        say(f"== {name}: {rep.shape} (written in {time.perf_counter() - started:.0f} s)",
            f"  {rep.params / 1e9:.3f}B parameters, {rep.weight_bytes / 2**30:.2f} GiB read per batch-1 decode step")
        prompts = parity_prompts(prof)
        ours = run_ours(path, prof, rep, prompts, inject, device)
        run_transformers(path, prof, rep, prompts, ours, device)
    say(f"  ({time.perf_counter() - started:.0f} s for {name})")
    return rep


def check_features(prof: Profile, device: torch.device) -> tuple[list[str], list[str]]:
    """The feature rows on a seeded model of prof.features' shape: their markdown and the sections that failed."""
    from floodway.engine.models.builtin import write_random_model

    arch, overrides = SHAPES[prof.features]
    dtype = features.dtype_for(prof.device, prof.dtype)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="floodway-gpu-check-") as tmp:
        path = write_random_model(pathlib.Path(tmp) / prof.features, arch, seed=0, device=prof.device, dtype=dtype,
                                  **overrides)
        title = f"Engine features on {prof.features} ({describe(path)}), {dtype}"
        say("", f"== {title}")
        lines, failed = features.run(path, prof.device, dtype, prof.concurrency, prof.feature_tokens,
                                     pathlib.Path(tmp), say)
    free(device)
    say(f"  ({time.perf_counter() - started:.0f} s for the feature rows)")
    return ["", f"## {title}", *lines], failed


def describe(path: str) -> str:
    import json

    c = json.loads((pathlib.Path(path) / "config.json").read_text())
    return (f"{c['model_type']}, hidden {c['hidden_size']}, {c['num_hidden_layers']} layers, "
            f"{c['num_attention_heads']} heads, {c['num_key_value_heads']} KV heads, intermediate "
            f"{c['intermediate_size']}, vocabulary {c['vocab_size']}")


def parity_prompts(prof: Profile) -> list[list[int]]:
    """Ids within the built-in tokenizer's vocabulary, of lengths spread over the profile's range."""
    import random

    rng = random.Random(1)
    lo, hi = prof.parity_lengths
    return [[rng.randrange(4, 4096) for _ in range(rng.randint(lo, hi))] for _ in range(prof.parity_prompts)]


def _fmt(x: float | str) -> str:
    return f"{x:,.1f} tok/s" if isinstance(x, float) else f"failed ({x})" if x != "n/a" else x


def _ratio(a: float, b: float | str | None) -> str:
    return f"{a / b:.2f}x" if isinstance(b, float) and b else "-"


def readme_tables(reports: list[ModelReport], bounds: Bounds, prof: Profile, title: str) -> list[str]:
    """Markdown to paste into the README (pure)."""
    k = prof.parity_tokens
    lines = [title, "",
             f"| model | parity ({prof.parity_prompts} prompts, {k} tokens) | KV blocks | batch-1 decode (HBM bound) | "
             f"prefill (FLOP bound) | batch-1 decode, --enforce-eager |", "|---|---|---|---|---|---|"]
    for r in reports:
        hbm = bounds.bandwidth / r.weight_bytes
        flop = bounds.peak / (2 * r.matmul_params)
        ours_med = statistics.median(x.ours_vs_ref for x in r.parity_rows)
        run_med = statistics.median(x.run_vs_ref for x in r.parity_rows)
        eager = f"{r.eager_b1:,.1f} tok/s" if r.eager_b1 is not None else "no flag"
        passed = sum(x.ok for x in r.parity_rows)
        lines.append(f"| {r.name} ({r.params / 1e9:.2f}B) | {passed}/{len(r.parity_rows)} pass; "
                     f"= float32 for median {ours_med:g} tokens (transformers {prof.dtype}: {run_med:g}) | "
                     f"{r.kv} | {r.ours[1]:,.1f} tok/s of {hbm:,.0f} (**{r.ours[1] / hbm:.0%}**) | "
                     f"{r.prefill:,.0f} tok/s of {flop:,.0f} (**{r.prefill / flop:.0%}**) | {eager} |")
    lines += ["", "| model | batch | floodway tok/s | transformers static batch | transformers continuous batching |",
              "|---|---|---|---|---|"]
    for r in reports:
        for b in prof.batches:
            cb = r.continuous.get(b, "n/a")
            cb_cell = f"{cb:,.1f} (**{_ratio(r.ours[b], cb)}**)" if isinstance(cb, float) else \
                ("failed" if cb != "n/a" else "n/a")
            lines.append(f"| {r.name} | {b} | {r.ours[b]:,.1f} | {r.static[b]:,.1f} (**{_ratio(r.ours[b], r.static[b])}"
                         f"**) | {cb_cell} |")
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="e2e/gpu/check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU in float32 (the dry run make test does)")
    p.add_argument("--models", help=f"comma-separated, from {', '.join(SHAPES)}")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), help="the run dtype")
    p.add_argument("--features", help=f"the shape of the feature rows (quantized weights, speculative decoding, "
                                      f"LoRA), from {', '.join(SHAPES)}; none: no feature rows")
    p.add_argument("--out", help="also write the README tables to this file")
    p.add_argument("--inject-mismatch", action="store_true",
                   help="self-test: bias our first parity prompt toward one token; the check must then fail")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    prof = CPU if args.cpu else GPU
    prof = dataclasses.replace(prof, **{k: v for k, v in dict(
        dtype=args.dtype, models=tuple(args.models.split(",")) if args.models else None,
        features=args.features).items() if v})
    unknown = [m for m in (*prof.models, prof.features) if m not in SHAPES and m != "none"]
    if unknown:
        say(f"unknown model(s) {unknown}; choose from {list(SHAPES)}")
        return 2
    device = torch.device(prof.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        say("no CUDA device here: run with --cpu for the dry run")
        return 2
    import transformers

    # Its own handler, past TRANSFORMERS_VERBOSITY: the baseline's eos_token_id=None warns on every run.
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    title = (f"GPU check, {datetime.date.today()}, {name}, {prof.dtype}, torch {torch.__version__}, transformers "
             f"{transformers.__version__}")
    say(f"# {title}")
    started = time.perf_counter()
    bounds = Bounds(speed.copy_bandwidth(device, prof.copy_bytes),
                    speed.matmul_peak(device, getattr(torch, prof.dtype), prof.matmul_n))
    say(f"device copy bandwidth {bounds.bandwidth / 1e9:,.1f} GB/s (read + write of {prof.copy_bytes >> 20} MiB); "
        f"{prof.dtype} matmul {bounds.peak / 1e12:.3g} TFLOP/s ({prof.matmul_n}^3)",
        f"decode: {prof.decode_prompt}-token prompts, {prof.decode_tokens} new tokens each, output tokens over wall "
        f"seconds (prefill included); engine {engine_kwargs(prof)}, otherwise its defaults")
    reports = [check_model(m, prof, device, args.inject_mismatch) for m in prof.models]
    tables = readme_tables(reports, bounds, prof, title)
    write_out(args.out, tables)  # already, so a run cut short in the feature rows keeps these
    failed_features: list[str] = []
    if prof.features != "none":
        lines, failed_features = check_features(prof, device)
        tables += lines
        write_out(args.out, tables)
    say("", "## README table", *tables)
    failed = [r.name for r in reports if not all(x.ok for x in r.parity_rows)]
    say("", f"{time.perf_counter() - started:.0f} s in all",
        f"PARITY FAILURE: {', '.join(failed)}" if failed else "parity: every prompt ok",
        f"FEATURE FAILURE: {', '.join(failed_features)}" if failed_features else
        f"features: {'none run' if prof.features == 'none' else 'every section ran'}")
    return 1 if failed or failed_features else 0


def write_out(out: str | None, tables: list[str]) -> None:
    if out:
        pathlib.Path(out).write_text("\n".join(tables) + "\n")


if __name__ == "__main__":
    sys.exit(main())
