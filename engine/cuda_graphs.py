"""CUDA graphs for decode-only steps: the model forward replayed without Python in the loop.

At startup the decode forward is captured once per batch size in `capture_sizes` over preallocated device buffers
(token ids, positions, cache slots, block tables, context lengths). A step whose sequences all compute one token and
keep no prompt logits is padded to the nearest captured size: its inputs are copied into the buffers and the graph
is replayed. Padded rows compute token 0 at position 0, write their K/V into a scratch block that no sequence owns,
and attend over no context (context length 0). Other steps run eagerly.

With LoRA slots, each size is captured twice: without adapter rows (the LoRA layers add nothing), and with the
Triton segment kernels over fixed buffers (each row's slot grouping and each slot's start, `lora_inputs`) and a
grid sized for every row of every slot, whose programs past their slot's rows return at once. So a step serving
adapters replays too; a base-model step does not launch the adapter kernels.
"""

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from floodway.engine.attention import KernelInputs, StepMeta
from floodway.engine.step_inputs import SeqInput

SMALL_SIZES = (1, 2, 4)
SIZE_STRIDE = 8  # beyond the small sizes, every multiple of this


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The decode batch sizes captured: 1, 2, 4, then each multiple of 8, and max_num_seqs itself (pure)."""
    sizes = [s for s in (*SMALL_SIZES, *range(SIZE_STRIDE, max_num_seqs + 1, SIZE_STRIDE)) if s <= max_num_seqs]
    return sizes if sizes[-1] == max_num_seqs else [*sizes, max_num_seqs]


def padded_size(seqs: list[SeqInput], sizes: list[int]) -> int | None:
    """The captured size a step replays at, or None where it runs eagerly: a prefill chunk (more than one token),
    prompt-logprob rows, or more sequences than the largest size (pure)."""
    if not seqs or len(seqs) > sizes[-1] or any(len(s.token_ids) != 1 or s.num_prompt_logits for s in seqs):
        return None
    return sizes[bisect.bisect_left(sizes, len(seqs))]


@dataclass
class HostInputs:
    tokens: np.ndarray  # [3, size] int64: token ids, positions, cache slots
    context_lens: np.ndarray  # [size] int32
    block_tables: np.ndarray  # [size, width] int32; width: the most blocks a row's context covers


def host_inputs(seqs: list[SeqInput], size: int, block_size: int, scratch_slot: int) -> HostInputs:
    """One decode step's buffer contents, padded to `size` rows (pure). Row i is seqs[i]; padded rows hold token 0
    at position 0, write to the scratch slot and have no context."""
    tokens = np.zeros((3, size), np.int64)
    tokens[2] = scratch_slot
    ctx = np.zeros(size, np.int32)
    width = max(s.start_pos // block_size + 1 for s in seqs)
    tables = np.zeros((size, width), np.int32)
    for i, s in enumerate(seqs):
        p = s.start_pos
        used = s.block_table[:p // block_size + 1]  # the blocks holding positions 0..p
        tokens[:, i] = (s.token_ids[0], p, used[-1] * block_size + p % block_size)
        ctx[i] = p + 1
        tables[i, :len(used)] = used
    return HostInputs(tokens, ctx, tables)


def lora_inputs(seqs: list[SeqInput], size: int, num_slots: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The segment kernels' inputs for a decode step, or None when no row uses an adapter (pure): rows of each slot
    together (int32 [size], padding after them) and each slot's start (int32 [num_slots + 1])."""
    from floodway.engine.kernels.lora_matmul import by_slot
    from floodway.engine.lora import batch

    p = batch.plan([s.lora_slot for s in seqs])
    if p is None:
        return None
    grouped, starts = by_slot(p.runs, p.rows, p.dest, p.per_slot)
    rows = np.zeros(size, np.int32)
    rows[:len(grouped)] = grouped
    return rows, np.array(starts + [starts[-1]] * (num_slots + 1 - len(starts)), np.int32)


def sampling_rows(seqs: list[SeqInput]) -> list[int] | None:
    """The rows whose logits the step returns, or None when every row samples (pure)."""
    rows = [i for i, s in enumerate(seqs) if s.samples]
    return None if len(rows) == len(seqs) else rows


class DecodeGraphs:
    """Device buffers and one step function per size in `sizes`: a captured graph's replay, or with capture=False
    the same forward run eagerly over the same buffers (how the CPU tests check everything but the capture)."""

    def __init__(self, model, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor], sizes: list[int],
                 max_blocks_per_seq: int, block_size: int, scratch_block: int, capture: bool = True, lora=None):
        """lora: the model's LoRA `Slots`, if it has them."""
        dev = k_caches[0].device
        self.model, self.k_caches, self.v_caches, self.lora = model, k_caches, v_caches, lora
        self.sizes, self.block_size = sizes, block_size
        self.scratch_slot = scratch_block * block_size
        n = sizes[-1]
        self.tokens = torch.zeros(3, n, dtype=torch.long, device=dev)
        self.tokens[2] = self.scratch_slot  # the warm-up and capture forwards write there
        self.context_lens = torch.zeros(n, dtype=torch.int32, device=dev)
        self.block_tables = torch.zeros(n, max_blocks_per_seq, dtype=torch.int32, device=dev)
        self.no_prefill = torch.zeros(1, dtype=torch.int32, device=dev)
        modes = (False, True) if lora is not None else (False,)  # with adapter rows or without
        self.steps: dict[tuple[int, bool], Callable[[], torch.Tensor]] = {
            (s, a): functools.partial(self._forward, s, a) for s in sizes for a in modes}
        if lora is not None:
            from floodway.engine.kernels.lora_matmul import Segments
            from floodway.engine.lora.batch import DeviceBatch

            self.num_slots = lora.scale.shape[0]
            self.lora_rows = torch.zeros(n, dtype=torch.int32, device=dev)
            self.lora_starts = torch.zeros(self.num_slots + 1, dtype=torch.int32, device=dev)
            self.lora_batches = {s: DeviceBatch([], None, None, None, 0, 0, Segments(
                self.lora_rows[:s], self.lora_starts, self.num_slots, s)) for s in sizes}
        if capture:
            self._capture(dev)

    def _capture(self, dev: torch.device) -> None:
        pool = torch.cuda.graph_pool_handle()
        for size, adapters in sorted(self.steps, reverse=True):  # largest first: the smaller reuse its memory
            self._forward(size, adapters)  # warm-up outside capture: kernel compilation, allocator pools
            torch.cuda.synchronize(dev)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = self._forward(size, adapters)
            self.steps[size, adapters] = functools.partial(_replay, graph, logits)
        torch.cuda.synchronize(dev)

    def _forward(self, size: int, adapters: bool) -> torch.Tensor:
        if self.lora is not None:  # what the LoRA layers add is fixed here, at capture
            self.lora.step.batch = self.lora_batches[size] if adapters else None
        none = self.no_prefill  # query_start [0] of no chunks; empty tables and lengths
        kernel = KernelInputs(size, self.block_tables[:size], self.context_lens[:size], none[:0].view(0, 0), none,
                              none[:0])
        meta = StepMeta(self.k_caches, self.v_caches, self.tokens[2, :size], [], [], kernel)
        out = self.model(input_ids=self.tokens[0:1, :size], position_ids=self.tokens[1:2, :size], use_cache=False,
                         floodway_meta=meta)
        return out.logits[0].float()

    @torch.inference_mode()  # the buffers are inference tensors when built in inference mode, as the runner does
    def run(self, seqs: list[SeqInput]) -> torch.Tensor | None:
        """float32 logits [sampling seqs in order, V], or None when the step is not a captured decode step."""
        size = padded_size(seqs, self.sizes)
        if size is None:
            return None
        h = host_inputs(seqs, size, self.block_size, self.scratch_slot)
        self.tokens[:, :size].copy_(torch.from_numpy(h.tokens))
        self.context_lens[:size].copy_(torch.from_numpy(h.context_lens))
        self.block_tables[:size, :h.block_tables.shape[1]].copy_(torch.from_numpy(h.block_tables))
        segments = lora_inputs(seqs, size, self.num_slots) if self.lora is not None else None
        if segments is not None:
            self.lora_rows[:size].copy_(torch.from_numpy(segments[0]))
            self.lora_starts.copy_(torch.from_numpy(segments[1]))
        logits = self.steps[size, segments is not None]()
        rows = sampling_rows(seqs)
        # A copy: the graph's output buffer is overwritten by the next replay.
        return logits[:len(seqs)].clone() if rows is None else logits[rows]


def _replay(graph: torch.cuda.CUDAGraph, logits: torch.Tensor) -> torch.Tensor:
    graph.replay()
    return logits
