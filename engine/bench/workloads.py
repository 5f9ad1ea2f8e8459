"""Benchmark workloads as plain data (prompt token ids and output lengths), built deterministically.

(a) 32 requests, prompts of 16..256 tokens, 128 new tokens each.
(b) Azure 2023 conversation trace: prompt and output lengths of sampled rows, scaled by max_model_len / 4096
    (so a 4k-token context becomes a full-length one) and clipped to fit.
(c) Mooncake conversation trace shaped: prompts built from `hash_ids` (one id = one 512-token block, scaled to
    16 tokens), so requests that share leading ids share a token prefix; output lengths scaled as in (b).
"""

import csv
import json
import os
import random
from dataclasses import dataclass

from floodway.operator.simulator.traces import open_trace, resolve_trace

DEFAULT_REQUESTS = {"a": 32, "b": 64, "c": 48}
MOONCAKE_BLOCK = 512
SCALED_BLOCK = 16


@dataclass
class Workload:
    name: str
    prompts: list[list[int]]
    max_tokens: list[int]
    description: str

    @property
    def output_tokens(self) -> int:
        return sum(self.max_tokens)


def _random_tokens(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(4, vocab) for _ in range(n)]  # ids 0..3 are special tokens in the built-in vocab


def build(name: str, num_requests: int | None, max_model_len: int, vocab: int,
          traces: str | os.PathLike | None = None, seed: int = 0) -> Workload:
    """traces: the traces folder (default: the vendored data/traces)."""
    n = num_requests or DEFAULT_REQUESTS[name]
    rng = random.Random(seed)
    if name == "a":
        prompts = [_random_tokens(rng, rng.randint(16, 256), vocab) for _ in range(n)]
        return Workload("a", prompts, [128] * n, f"{n} requests, prompts 16-256, 128 new tokens")
    scale = max_model_len / 4096
    if name == "b":
        with open_trace(resolve_trace("azure-conv", traces)) as f:
            rows = list(csv.DictReader(f))
        picked = rng.sample(rows, n)
        lengths = [_fit(int(r["ContextTokens"]) * scale, int(r["GeneratedTokens"]) * scale, max_model_len)
                   for r in picked]
        prompts = [_random_tokens(rng, p, vocab) for p, _ in lengths]
        return Workload("b", prompts, [o for _, o in lengths],
                        f"{n} requests sampled from the Azure conversation trace, lengths x{scale:g}")
    if name == "c":
        with open_trace(resolve_trace("mooncake", traces)) as f:
            rows = [json.loads(line) for _, line in zip(range(n), f, strict=False)]
        blocks: dict[int, list[int]] = {}
        prompts, outs = [], []
        for r in rows:
            ids = [t for h in r["hash_ids"] for t in blocks.setdefault(h, _random_tokens(rng, SCALED_BLOCK, vocab))]
            p, o = _fit(r["input_length"] * SCALED_BLOCK / MOONCAKE_BLOCK, r["output_length"] * scale, max_model_len)
            prompts.append(ids[:p])
            outs.append(o)
        return Workload("c", prompts, outs, f"first {n} requests of the Mooncake trace, 512-token blocks -> "
                                            f"{SCALED_BLOCK}, outputs x{scale:g}")
    raise ValueError(f"workload must be a, b or c, got {name!r}")


def _fit(prompt: float, output: float, max_model_len: int) -> tuple[int, int]:
    out = max(1, min(round(output), max_model_len // 4))
    return max(1, min(round(prompt), max_model_len - out)), out
