"""The systems under test, each run on the same workload: our engine and three transformers baselines.
Each returns a RunResult; throughput is useful output tokens over wall seconds, all requests submitted at once."""

import math
import time
from dataclasses import dataclass, field

from floodway.engine.bench.workloads import Workload


@dataclass
class RunResult:
    name: str
    output_tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # process CPU time (all threads): robust to other load on a shared machine
    note: str = ""
    error: str | None = None
    kv: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds and not self.error else 0.0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.output_tokens / self.cpu_seconds if self.cpu_seconds and not self.error else 0.0


class Clock:
    """Wall and process CPU seconds since creation."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _bar(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="req", leave=False)


def run_ours(engine, wl: Workload) -> RunResult:
    """Drives the step API; samples KV occupancy after every step to find the peak."""
    from floodway.engine.sampling_params import SamplingParams

    bs = engine.config.block_size
    peak = dict(blocks=0, utilization=0.0, running=0, live_tokens=0)
    clock = Clock()
    for i, (p, n) in enumerate(zip(wl.prompts, wl.max_tokens, strict=True)):
        engine.add_request(f"bench-{i}", p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    tokens = 0
    with _bar(len(wl.prompts), "floodway engine") as bar:
        while engine.has_unfinished_requests():
            for out in engine.step():
                tokens += len(out.new_token_ids)
                bar.update(int(out.finished))
            s = engine.stats()
            used = s.num_total_blocks - s.num_free_blocks
            if used > peak["blocks"]:
                live = sum(min(r.num_computed_tokens, r.num_tokens) for r in engine.scheduler.running)
                peak = dict(blocks=used, utilization=s.kv_utilization, running=s.num_running, live_tokens=live)
    seconds, cpu = clock.stop()
    s = engine.stats()
    contiguous = peak["running"] * math.ceil(engine.max_model_len / bs)
    kv = dict(peak_blocks=peak["blocks"], allocated_blocks=s.num_total_blocks, contiguous_blocks=contiguous,
              peak_utilization=peak["utilization"],
              contiguous_utilization=peak["live_tokens"] / (contiguous * bs) if contiguous else 0.0,
              prefix_hit_rate=s.prefix_cache_hits_total / max(s.prefix_cache_queries_total, 1),
              preemptions=s.num_preemptions_total)
    return RunResult("floodway engine", tokens, seconds, cpu, kv=kv)


def run_hf_sequential(model, wl: Workload, limit: int) -> RunResult:
    """One request at a time with `generate`; on the first `limit` requests (a rate, not the whole workload)."""
    import torch

    n = min(limit, len(wl.prompts))
    clock = Clock()
    with _bar(n, "transformers sequential") as bar:
        for p, k in zip(wl.prompts[:n], wl.max_tokens[:n], strict=True):
            model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                           max_new_tokens=k, min_new_tokens=k, do_sample=False)
            bar.update(1)
    return RunResult("transformers sequential", sum(wl.max_tokens[:n]), *clock.stop(),
                     note=f"first {n} of {len(wl.prompts)} requests")


def run_hf_static(model, wl: Workload, pad_id: int) -> RunResult:
    """All requests in one left-padded batch, run until the longest output; counts only requested tokens."""
    import torch

    width = max(len(p) for p in wl.prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in wl.prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in wl.prompts], device=model.device)
    k = max(wl.max_tokens)
    clock = Clock()
    with _bar(len(wl.prompts), "transformers static batch") as bar:
        model.generate(ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k, do_sample=False,
                       pad_token_id=pad_id)
        bar.update(len(wl.prompts))
    return RunResult("transformers static batch", wl.output_tokens, *clock.stop(),
                     note=f"padded to {width} prompt + {k} new tokens")


def run_hf_continuous(model, wl: Workload, max_batch_tokens: int) -> RunResult:
    """transformers' own continuous batching (`init_continuous_batching` manager), sized for this workload."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    page = 256
    blocks = sum(math.ceil((len(p) + k) / page) for p, k in zip(wl.prompts, wl.max_tokens, strict=True)) + 8
    gc = GenerationConfig(max_new_tokens=max(wl.max_tokens), do_sample=False, eos_token_id=None, pad_token_id=3)
    cbc = ContinuousBatchingConfig(page_size=page, num_blocks=blocks, max_batch_tokens=max_batch_tokens)
    try:
        with model.continuous_batching_context_manager(generation_config=gc, continuous_batching_config=cbc,
                                                       block=True, timeout=5) as mgr:
            clock = Clock()
            ids = [mgr.add_request(p, max_new_tokens=k, eos_token_id=[])
                   for p, k in zip(wl.prompts, wl.max_tokens, strict=True)]
            done, tokens = set(), 0
            with _bar(len(ids), "transformers continuous batching") as bar:
                while len(done) < len(ids):
                    r = mgr.get_result(timeout=1)
                    if r is not None and r.is_finished() and r.request_id not in done:
                        done.add(r.request_id)
                        tokens += len(r.generated_tokens)
                        bar.update(1)
                    elif r is None and not mgr.is_running():
                        raise RuntimeError("the continuous batching thread stopped")
            seconds, cpu = clock.stop()
    except Exception as e:  # report the exact failure instead of a figure
        return RunResult("transformers continuous batching", error=f"{type(e).__name__}: {e}")
    return RunResult("transformers continuous batching", tokens, seconds, cpu, note=f"page {page}, {blocks} pages")
