"""A step-cost profile of our engine for the autoscaler's simulator: prefill rate, decode step time per batch
size, KV capacity. Written as JSON by `floodway bench engine --profile-out FILE`."""

import random
import time

from floodway.engine.sampling_params import SamplingParams


def _drain(engine) -> None:
    for rid in list(engine.requests):
        engine.abort_request(rid)
    engine.step()


def measure(engine, model_name: str, batch_sizes=(1, 8, 32, 64), context: int = 256, steps: int = 4,
            prefill_tokens: int = 1024, seed: int = 0) -> dict:
    rng = random.Random(seed)
    vocab = engine.runner.vocab_size

    def prompt(n):
        return [rng.randrange(4, vocab) for _ in range(n)]

    n = min(prefill_tokens, engine.max_model_len - 1)
    engine.add_request("profile-prefill", prompt(n), SamplingParams(max_tokens=1, ignore_eos=True))
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    prefill_rate = n / (time.perf_counter() - start)
    decode = {}
    ctx = min(context, engine.max_model_len - steps - 4)
    for b in [b for b in batch_sizes if b <= engine.config.max_num_seqs]:
        for i in range(b):
            engine.add_request(f"profile-{b}-{i}", prompt(ctx), SamplingParams(max_tokens=steps + 2, ignore_eos=True))
        while engine.stats().num_waiting or any(not r.output_token_ids for r in engine.scheduler.running):
            engine.step()  # prefill everything first
        start = time.perf_counter()
        for _ in range(steps):
            engine.step()
        decode[str(b)] = (time.perf_counter() - start) / steps
        _drain(engine)
    s = engine.stats()
    return {"model": model_name, "prefill_tokens_per_s": prefill_rate, "decode_step_s": decode,
            "decode_context_tokens": ctx, "kv_capacity_tokens": s.num_total_blocks * engine.config.block_size,
            "max_num_seqs": engine.config.max_num_seqs, "block_size": engine.config.block_size,
            "max_num_batched_tokens": engine.config.max_num_batched_tokens, "device": str(engine.runner.device),
            "dtype": str(engine.runner.dtype).removeprefix("torch.")}
