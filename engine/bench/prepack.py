"""The engine's CPU decode step against a baseline built without one of its parts, side by side:
`python -P -m floodway.engine.bench.prepack [--baseline transformers|plain|eager] [--compile-decode]
[--dtype bfloat16|float32]`.

Two engines on the same model in one process: the engine as it runs on CPU in that dtype (our decoder,
engine/models/llama.py, with its linears prepacked by engine/packed_linear.py; its decode steps compiled with
--compile-decode) and the baseline: transformers' modules (`transformers`, prepacked too), our decoder with plain
linears (`plain`) or as it runs without --compile-decode (`eager`). Each decodes the same chat prompt at batch 1, 8
and 32 (after a short warm-up decode that compiles), alternating, best of 3 rounds of CPU time per decode step (one
thread).
"""

import time

import typer


def decode_ms(engine, prompt: list[int], batch: int, tokens: int) -> float:
    """CPU ms per decode step of `batch` copies of prompt (each a distinct last token), after their prefill."""
    from floodway.engine.sampling_params import SamplingParams

    for b in range(batch):
        engine.add_request(f"{time.monotonic_ns()}-{b}", prompt + [b + 5],
                           SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True))
    engine.step()  # the prefill
    start, steps = time.process_time(), 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
    return (time.process_time() - start) / steps * 1000


def main(model: str = "floodway/smollm2-135m-instruct", batches: str = "1,8,32", tokens: int = 32,
         rounds: int = 3, baseline: str = "transformers", compile_decode: bool = False,
         dtype: str = "bfloat16") -> None:
    import torch
    from floodway.engine import packed_linear
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine
    from floodway.engine.models.builtin import resolve_model

    torch.set_num_threads(1)
    if baseline not in ("transformers", "plain", "eager"):
        raise typer.BadParameter("baseline must be transformers, plain or eager")
    if dtype not in ("bfloat16", "float32"):
        raise typer.BadParameter("dtype must be bfloat16 or float32")
    if not packed_linear.supported(torch.device("cpu"), getattr(torch, dtype)):
        raise typer.Exit(f"this CPU or torch build has no oneDNN {dtype} kernels: not the engine's CPU {dtype} step")
    cfg = dict(model=resolve_model(model), dtype=dtype, max_model_len=512, max_num_seqs=64)
    ours = LLMEngine(EngineConfig(**cfg, compile_decode=compile_decode))
    if baseline == "transformers":
        base = LLMEngine(EngineConfig(**cfg, model_impl="transformers"))
    elif baseline == "eager":
        base = LLMEngine(EngineConfig(**cfg))
    else:
        real = packed_linear.supported
        packed_linear.supported = lambda *a: False  # the baseline keeps plain linear layers
        try:
            base = LLMEngine(EngineConfig(**cfg))
        finally:
            packed_linear.supported = real
    prompt = list(ours.tokenizer.apply_chat_template([{"role": "user", "content": "Write a short poem about autumn."}],
                                                     add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"])
    typer.echo(f"{model}, {dtype}, 1 thread, {tokens} tokens per sequence, best of {rounds} alternating rounds"
               f"{', engine with --compile-decode' if compile_decode else ''}\n\n"
               f"| batch | {baseline} ms/step | engine ms/step | speed-up |\n|---|---|---|---|")
    for batch in (int(b) for b in batches.split(",")):
        best = {"base": float("inf"), "ours": float("inf")}
        for engine in (base, ours):
            decode_ms(engine, prompt, batch, 4)
        for _ in range(rounds):
            for name, engine in (("base", base), ("ours", ours)):
                best[name] = min(best[name], decode_ms(engine, prompt, batch, tokens))
        typer.echo(f"| {batch} | {best['base']:.1f} | {best['ours']:.1f} | {best['base'] / best['ours']:.2f}x |")


if __name__ == "__main__":
    typer.run(main)
