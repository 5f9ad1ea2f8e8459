"""Runs the engine benchmark: builds the workload, runs each system in turn, prints the comparison."""

import json
import pathlib

import typer
from floodway.engine.bench import systems, workloads
from floodway.engine.bench.report import render

KNOWN_BASELINES = ("sequential", "static", "continuous", "vllm")


def run(model: str, workload: str, num_requests: int | None, max_model_len: int, seq_requests: int,
        baselines: list[str], profile_out: str | None, traces: str | None, threads: int = 0,
        dtype: str = "auto", tpot_slo_ms: float = 0.0, n: int = 0, vllm_python: str | None = None) -> None:
    unknown = [b for b in baselines if b not in KNOWN_BASELINES]
    if unknown:
        raise typer.BadParameter(f"unknown baseline(s) {unknown}; choose from {list(KNOWN_BASELINES)}")
    import torch
    from floodway.engine.bench.engine_profile import measure
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine
    from floodway.engine.models.builtin import resolve_model
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    cfg = EngineConfig(model=model, max_model_len=max_model_len, served_model_name=model, dtype=dtype)
    try:
        cfg.validate()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    path = resolve_model(model)
    cfg.model = path
    engine = LLMEngine(cfg)
    wl = workloads.build(workload, num_requests, max_model_len, engine.runner.vocab_size, traces)
    typer.echo(f"{wl.description}; {wl.output_tokens} output tokens; {torch.get_num_threads()} threads, "
               f"{engine.runner.device}, {engine.runner.dtype}")
    _warm(engine)
    results = [systems.run_ours(engine, wl)]
    if "vllm" in baselines:
        from floodway.engine.bench import vllm

        runner = engine.runner
        results.append(vllm.run_offline(vllm.python(vllm_python), wl, path, str(runner.dtype).removeprefix("torch."),
                                        max_model_len, cfg.max_num_seqs, cfg.max_num_batched_tokens,
                                        runner.num_blocks * runner.shape.block_bytes, threads))
    if set(baselines) - {"vllm"}:
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=engine.runner.dtype).to(engine.runner.device).eval()
        pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
        hf.generate(torch.tensor([[5, 6, 7]], device=hf.device), max_new_tokens=2, do_sample=False)  # warm-up
        with torch.inference_mode():
            if "static" in baselines:
                results.append(systems.run_hf_static(hf, wl, pad))
            if "continuous" in baselines:
                results.append(systems.run_hf_continuous(hf, wl, engine.config.max_num_batched_tokens))
            if "sequential" in baselines:
                results.append(systems.run_hf_sequential(hf, wl, seq_requests))
    typer.echo(render(wl.description, model, results))
    if tpot_slo_ms:
        from floodway.engine.bench.interference import compare

        typer.echo(compare(engine, tpot_slo_ms))
    if n > 1:
        from floodway.engine.bench.parallel import compare as compare_n

        k = max(1, len(wl.prompts) // n)  # as many sequences as the workload has requests
        typer.echo(compare_n(engine, [len(p) for p in wl.prompts[:k]], wl.max_tokens[:k], n))
    if profile_out:
        prof = measure(engine, model)
        pathlib.Path(profile_out).write_text(json.dumps(prof, indent=2))
        typer.echo(f"profile written to {profile_out}: {json.dumps(prof)}")


def _warm(engine) -> None:
    from floodway.engine.sampling_params import SamplingParams

    engine.add_request("warm-up", [5, 6, 7, 8], SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
