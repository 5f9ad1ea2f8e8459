"""Prepacked bf16 linear weights against plain ones, side by side: `python -P -m floodway.engine.bench.prepack`.

Two engines on the same model in one process, one with its linears packed (engine/packed_linear.py, what the engine
does on CPU in bf16) and one with the plain transformers layers; each decodes the same chat prompt at batch 1, 8 and
32, alternating, best of 3 rounds of CPU time per decode step (one thread).
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
         rounds: int = 3) -> None:
    import torch
    from floodway.engine import packed_linear
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine
    from floodway.engine.models.builtin import resolve_model

    torch.set_num_threads(1)
    if not packed_linear.supported(torch.device("cpu"), torch.bfloat16):
        raise typer.Exit("this CPU or torch build has no oneDNN bf16 kernels: nothing to compare")
    path = resolve_model(model)
    packed = LLMEngine(EngineConfig(model=path, dtype="bfloat16", max_model_len=512, max_num_seqs=64))
    real = packed_linear.supported
    packed_linear.supported = lambda *a: False  # the second engine keeps transformers' plain layers
    try:
        plain = LLMEngine(EngineConfig(model=path, dtype="bfloat16", max_model_len=512, max_num_seqs=64))
    finally:
        packed_linear.supported = real
    prompt = list(plain.tokenizer.apply_chat_template([{"role": "user", "content": "Write a short poem about autumn."}],
                                                      add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)["input_ids"])
    typer.echo(f"{model}, bf16, 1 thread, {tokens} tokens per sequence, best of {rounds} alternating rounds\n\n"
               "| batch | plain ms/step | prepacked ms/step | speed-up |\n|---|---|---|---|")
    for batch in (int(b) for b in batches.split(",")):
        best = {"plain": float("inf"), "packed": float("inf")}
        for _ in range(rounds):
            for name, engine in (("plain", plain), ("packed", packed)):
                best[name] = min(best[name], decode_ms(engine, prompt, batch, tokens))
        typer.echo(f"| {batch} | {best['plain']:.1f} | {best['packed']:.1f} | {best['plain'] / best['packed']:.2f}x |")


if __name__ == "__main__":
    typer.run(main)
