"""Speed figures of the GPU check: the device's copy bandwidth and matmul peak (the bounds), a model's weight bytes
and matmul parameters, and decode and prefill tokens/s of our engine and of transformers' two batching modes."""

import random
import time

import torch
from floodway.engine.bench import systems
from floodway.engine.bench.workloads import Workload


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn, device: torch.device, repeat: int) -> float:
    """Mean seconds of fn over `repeat` calls, after one warm-up call; the device's queue drained at both ends."""
    fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeat


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes/s of one big device-to-device copy, read and write counted: a decode step's weight reads at best."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / seconds_per_call(lambda: dst.copy_(src), device, repeat=10)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of a square n x n matmul in dtype: what a prefill's matmuls reach at best."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    return 2 * n**3 / seconds_per_call(lambda: a @ b, device, repeat=30)


def skeleton(path: str, dtype: torch.dtype):
    """The model at path built on the meta device: its parameters' shapes and dtype, no memory, no weights read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)


def weight_bytes(model) -> int:
    """Bytes one batch-1 decode step reads: every weight (parameters() counts a tied one once) but the input
    embedding table, of which it reads one row, unless the output head is that table."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return total if emb is head else total - emb.numel() * emb.element_size()


def matmul_params(model) -> int:
    """Parameters each prompt token is multiplied through: the decoder layers' (the output head runs on the last
    token of a prompt only)."""
    return sum(p.numel() for p in model.get_decoder().layers.parameters())


def random_prompts(seed: int, n: int, length: int, vocab: int) -> list[list[int]]:
    """Fresh token ids for each call (a new seed), so no run hits the prefix cache of another."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(length)] for _ in range(n)]


def ours(llm, prompts: list[list[int]], new_tokens: int) -> float:
    """Output tokens/s of our engine on the batch (greedy, all submitted at once; includes their prefill)."""
    from floodway.engine.sampling_params import SamplingParams

    start = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True))
    return sum(len(o.output_token_ids) for o in outs) / (time.perf_counter() - start)


def prefill(llm, prompts: list[list[int]]) -> float:
    """Prompt tokens/s of our engine: the prompts prefilled (in the engine's token budget per step), one token
    sampled each."""
    start = time.perf_counter()
    ours(llm, prompts, 1)
    return sum(map(len, prompts)) / (time.perf_counter() - start)


def transformers_static(model, prompts: list[list[int]], new_tokens: int) -> float:
    """Output tokens/s of one `generate` over the batch (equal prompt lengths here, so no padding)."""
    wl = Workload("decode", prompts, [new_tokens] * len(prompts), "")
    return systems.run_hf_static(model, wl, pad_id=0).tokens_per_s


def transformers_continuous(model, prompts: list[list[int]], new_tokens: int, max_batch_tokens: int) -> float | str:
    """Output tokens/s of transformers' continuous batching manager, or its error."""
    wl = Workload("decode", prompts, [new_tokens] * len(prompts), "")
    r = systems.run_hf_continuous(model, wl, max_batch_tokens)
    return r.error or r.tokens_per_s


def has_continuous_batching(model) -> bool:
    """Whether this transformers has the manager and the config class systems.run_hf_continuous drives."""
    try:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: F401
    except ImportError:
        return False
    return hasattr(model, "continuous_batching_context_manager")
