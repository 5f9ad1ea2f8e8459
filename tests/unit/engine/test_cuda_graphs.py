"""CUDA graphs for decode steps: the size set, the padding choice and the buffer contents (pure), and the graph
path's logits against the eager forward's: replayed graphs on a CUDA device, the same buffers run uncaptured
through the Triton kernels in Triton's interpreter elsewhere."""

import os
import subprocess
import sys

import pytest
import torch
from floodway.engine.cuda_graphs import capture_sizes, host_inputs, padded_size, sampling_rows
from floodway.engine.step_inputs import SeqInput


def test_capture_sizes_cover_every_batch_up_to_max_num_seqs():
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert capture_sizes(30) == [1, 2, 4, 8, 16, 24, 30]
    assert capture_sizes(3) == [1, 2, 3]
    assert capture_sizes(1) == [1]


def _decode(pos: int, table: list[int], samples: bool = True) -> SeqInput:
    return SeqInput([7], pos, table, samples)


def test_padded_size_is_the_nearest_captured_size_or_eager():
    sizes = [1, 2, 4, 8]
    assert [padded_size([_decode(3, [0])] * n, sizes) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert padded_size([_decode(3, [0])] * 9, sizes) is None  # more than the largest graph
    assert padded_size([], sizes) is None
    assert padded_size([_decode(3, [0]), SeqInput([1, 2], 0, [1], True)], sizes) is None  # a prefill chunk
    assert padded_size([_decode(3, [0]), SeqInput([1], 4, [1], True, num_prompt_logits=1)], sizes) is None


def test_host_inputs_fill_rows_in_order_and_pad_to_the_scratch_slot():
    bs, scratch = 4, 40
    seqs = [_decode(9, [3, 5, 8, 2]),  # position 9: offset 1 of its third block, 8
            SeqInput([11], 3, [6], True),  # position 3: last slot of block 6
            _decode(4, [1, 2])]  # position 4: first slot of its second block
    h = host_inputs(seqs, 4, bs, scratch)
    assert h.tokens.tolist() == [[7, 11, 7, 0], [9, 3, 4, 0], [8 * 4 + 1, 6 * 4 + 3, 2 * 4 + 0, scratch]]
    assert h.context_lens.tolist() == [10, 4, 5, 0]
    # Only the blocks holding the context (the first block still unused by seq 0, block 2, is left out).
    assert h.block_tables.tolist() == [[3, 5, 8], [6, 0, 0], [1, 2, 0], [0, 0, 0]]


def test_sampling_rows_keep_only_sampling_seqs():
    assert sampling_rows([_decode(1, [0]), _decode(2, [0])]) is None
    assert sampling_rows([_decode(1, [0], samples=False), _decode(2, [0])]) == [1]


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and not INTERPRETED


if not INTERPRETED and not CUDA:
    def test_decode_graph_path_in_triton_interpreter():
        """Without CUDA: the graph path's buffers, padding and kernel inputs run uncaptured, through the Triton
        kernels in the interpreter, against the SDPA path (a child process: triton reads the variable at import)."""
        pytest.importorskip("triton", reason="triton is not installed (the CPU engine image leaves it out)")
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONSAFEPATH": "1"}
        child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k",
                                "equal_the_eager"], env=env, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
        assert " passed" in child.stdout and "skipped" not in child.stdout, child.stdout[-2000:]


@pytest.mark.skipif(not (CUDA or INTERPRETED), reason="needs a CUDA device (or runs in the interpreter's child)")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_graphs_equal_the_eager_forward(tiny_model_path, dtype):
    """Sequences are prefilled eagerly, then each decode step runs both ways on the same inputs (the K/V it writes
    are the same values): batches of 1, 3 (padded to 4) and 5 (padded to 8), one row not sampling. On CUDA the
    engine's own captured graphs replay; in the interpreter the same buffers run uncaptured."""
    runner, graphs = _runner_and_graphs(tiny_model_path, dtype)
    gen = torch.Generator().manual_seed(0)
    lengths = [5, 16, 17, 33, 40]  # within a block, at block boundaries, across several blocks
    tables = [list(range(i * 12, i * 12 + 4)) for i in range(len(lengths))]
    prompts = [torch.randint(4, 4000, (n,), generator=gen).tolist() for n in lengths]
    runner.execute([SeqInput(p, 0, t, True) for p, t in zip(prompts, tables, strict=True)])
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == "float32" else dict(atol=5e-2, rtol=5e-2)
    for count in (1, 3, 5):
        seqs = [SeqInput([100 + i], n, t, samples=i != 1)
                for i, (n, t) in enumerate(zip(lengths, tables, strict=True))][:count]
        eager = runner.forward_eager(seqs)  # first: a padded row writing into a real block would change the graph's
        graph = graphs.run(seqs)
        assert graph.shape == eager.shape == (count - (count > 1), runner.vocab_size)
        torch.testing.assert_close(graph, eager, **tol)
        if dtype == "float32":  # in bf16 a near tie may round either way (the graph's split-K sums differently)
            assert torch.equal(graph.argmax(-1), eager.argmax(-1))
    assert graphs.run([SeqInput([1, 2], 40, tables[-1], True)]) is None  # a chunk runs eagerly


def _runner_and_graphs(model: str, dtype: str, **lora):
    """The engine's runner and its decode graphs: captured on CUDA, uncaptured over the same buffers elsewhere."""
    from floodway.engine.config import EngineConfig
    from floodway.engine.cuda_graphs import DecodeGraphs
    from floodway.engine.model_runner import ModelRunner

    runner = ModelRunner(EngineConfig(model=model, device="cuda" if CUDA else "cpu", dtype=dtype, max_model_len=256,
                                      num_kv_blocks=64, max_num_seqs=8, enforce_eager=not CUDA, **lora))
    if CUDA:
        assert runner.graphs is not None and runner.graphs.sizes == [1, 2, 4, 8]
        return runner, runner.graphs
    # a 65th block for the padded rows, as the engine allocates on CUDA
    runner.k_caches, runner.v_caches = ([torch.cat([c, c[:1]]) for c in caches]
                                        for caches in (runner.k_caches, runner.v_caches))
    return runner, DecodeGraphs(runner.model, runner.k_caches, runner.v_caches, [1, 2, 4, 8], 16, 16, 64,
                                capture=False, lora=runner.lora)


def test_lora_inputs_group_rows_by_slot_and_pad():
    from floodway.engine.cuda_graphs import lora_inputs

    seqs = [SeqInput([7], 3, [0], True, lora_slot=s) for s in (2, -1, 0, 2, 0)]
    rows, starts = lora_inputs(seqs, 8, num_slots=4)
    assert rows.tolist() == [2, 4, 0, 3, 0, 0, 0, 0] and starts.tolist() == [0, 2, 2, 4, 4]
    assert lora_inputs(seqs[1:2], 1, num_slots=4) is None  # base-model rows only: the graph without adapters


@pytest.mark.skipif(not (CUDA or INTERPRETED), reason="needs a CUDA device (or runs in the interpreter's child)")
def test_decode_graphs_with_adapters_equal_the_eager_forward(tiny_model_path, tmp_path, cuda_lora_layout):
    """A LoRA engine's decode steps replay too: rows of two adapters of different ranks beside base-model rows give
    the eager forward's logits (on the CPU its gathered bmm, here against the segment kernels over the graph's fixed
    buffers), and the adapters change them; a step of base-model rows alone gives the base model's logits."""
    from floodway.engine.bench.lora import write_adapter
    from floodway.engine.lora import peft_format

    runner, graphs = _runner_and_graphs(tiny_model_path, "float32", enable_lora=True, max_loras=3, max_lora_rank=8)
    slots = runner.lora
    for slot, rank in ((0, 8), (2, 3)):  # slot 1 stays empty: no rows, zero weights
        path = write_adapter(tmp_path / str(slot), slots.geometry, rank, seed=rank)
        slots.load(slot, peft_format.load(path, slots.geometry, 8, torch.float32))
    gen = torch.Generator().manual_seed(0)
    lengths, lora = [5, 17, 33, 40, 9], [0, -1, 2, 0, 2]
    tables = [list(range(i * 12, i * 12 + 4)) for i in range(len(lengths))]
    prompts = [torch.randint(4, 4000, (n,), generator=gen).tolist() for n in lengths]
    runner.execute([SeqInput(p, 0, t, True, lora_slot=s) for p, t, s in zip(prompts, tables, lora, strict=True)])
    step = [SeqInput([100 + i], n, t, True, lora_slot=s)
            for i, (n, t, s) in enumerate(zip(lengths, tables, lora, strict=True))]
    eager = runner.forward_eager(step)
    graph = graphs.run(step)
    torch.testing.assert_close(graph, eager, atol=1e-4, rtol=1e-4)
    base = [SeqInput(q.token_ids, q.start_pos, q.block_table, True) for q in step]
    without = runner.forward_eager(base)
    assert (graph - without).abs().amax(-1)[[0, 2, 3, 4]].min() > 1e-2  # each adapter row moved
    torch.testing.assert_close(graph[1], without[1], atol=1e-4, rtol=1e-4)  # the base row did not
    torch.testing.assert_close(graphs.run(base), without, atol=1e-4, rtol=1e-4)
