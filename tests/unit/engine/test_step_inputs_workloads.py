import pytest
import torch
from floodway.engine import attention
from floodway.engine.bench import workloads
from floodway.engine.step_inputs import SeqInput, build, decode_groups


def test_decode_groups_bound_padding():
    assert decode_groups([100, 90, 70, 50, 20, 5]) == [(0, 3), (3, 4), (4, 5), (5, 6)]
    assert decode_groups([100] * 5) == [(0, 5)]
    assert decode_groups([1000, 500, 250, 120, 60, 30]) == [(0, 1), (1, 2), (2, 3), (3, 6)]  # at most 4 groups
    assert decode_groups([]) == []


def test_build_packs_decodes_first_and_keeps_logits_in_caller_order():
    k = [torch.zeros(8, 4, 1, 2)]
    seqs = [SeqInput([7, 8, 9], 0, [5], True),  # prefill
            SeqInput([1], 3, [2], True),  # decode, context 4
            SeqInput([4, 5], 4, [3, 6], False),  # prefill chunk after a cached prefix, no sampling
            SeqInput([2], 9, [0, 1, 4], True)]  # decode, context 10 (longest: packed first)
    meta, ids, pos, keep = build(seqs, 4, k, k, "cpu", path="sdpa")
    assert ids.tolist() == [[2, 1, 4, 5, 7, 8, 9]]
    assert pos.tolist() == [[9, 3, 4, 5, 0, 1, 2]]
    assert meta.slot_mapping.tolist() == [4 * 4 + 1, 2 * 4 + 3, 6 * 4 + 0, 6 * 4 + 1, 20, 21, 22]
    assert keep.tolist() == [6, 1, 0]  # last token of seqs 0, 1, 3 in the packed batch
    [g0, g1] = meta.decodes
    assert (g0.start, g0.count, g0.blocks.tolist()) == (0, 1, [0, 1, 4])
    assert (g1.start, g1.count, g1.blocks.tolist()) == (1, 1, [2])
    assert g0.mask.shape == (1, 1, 1, 12) and g0.mask.sum() == 10
    p0, p1 = meta.prefills
    assert p0.start == 2 and p0.blocks.tolist() == [3, 6] and p0.ctx_len == 6
    assert p0.mask.tolist()[0] == [True] * 5 + [False]
    assert p1.start == 4 and p1.blocks is None and p1.mask is None


def test_the_cpu_kernel_path_takes_sequences_of_few_rows_and_sdpa_the_longer_chunks():
    """Our CPU kernel's inputs: each sequence of up to KERNEL_ROWS tokens (for the cache's dtype) by its packed first
    row, rows and context, with its blocks (padded with block 0); a longer chunk stays an SDPA prefill chunk at its
    packed row."""
    k = [torch.zeros(16, 4, 1, 2, dtype=torch.bfloat16)]
    long = attention.KERNEL_ROWS[torch.bfloat16] + 1
    seqs = [SeqInput([7] * long, 0, list(range(9)), True),  # a long prefill chunk
            SeqInput([1], 3, [12], True),  # decode, context 4
            SeqInput([4, 5], 4, [13, 14], False),  # a short chunk after a cached prefix (a verify's drafts)
            SeqInput([2], 9, [9, 10, 11], True)]  # decode, context 10
    meta = build(seqs, 4, k, k, "cpu", path="cpu")[0]
    assert meta.decodes == [] and meta.kernel is None
    assert meta.cpu.seqs.tolist() == [[0, 1, 10], [1, 1, 4], [2, 2, 6]] and meta.cpu.max_ctx == 10
    assert meta.cpu.tables.tolist() == [[9, 10, 11], [12, 0, 0], [13, 14, 0]]
    assert not meta.cpu.decodes_only and not meta.decodes_only()
    [chunk] = meta.prefills
    assert (chunk.start, chunk.length, chunk.blocks, chunk.mask) == (4, long, None, None)
    decodes = build([seqs[1], seqs[3]], 4, k, k, "cpu", path="cpu")[0]
    assert decodes.cpu.decodes_only and decodes.decodes_only() and decodes.prefills == []
    f32 = [t.float() for t in k]  # float32 chunks go to SDPA
    mixed = build(seqs[1:], 4, f32, f32, "cpu", path="cpu")[0]
    assert mixed.cpu.seqs.tolist() == [[0, 1, 10], [1, 1, 4]] and [c.length for c in mixed.prefills] == [2]
    with pytest.raises(ValueError, match="not one of"):
        build(seqs, 4, k, k, "cpu", path="flash")


def test_workload_a_is_deterministic_and_fits():
    a1 = workloads.build("a", None, 512, 4096)
    a2 = workloads.build("a", None, 512, 4096)
    assert a1 == a2 and len(a1.prompts) == 32 and set(a1.max_tokens) == {128}
    assert all(16 <= len(p) <= 256 for p in a1.prompts)
    with pytest.raises(ValueError, match="workload"):
        workloads.build("z", 4, 512, 4096)


def test_trace_workloads_fit_and_share_prefixes():
    b = workloads.build("b", 20, 512, 4096)
    assert all(len(p) + n <= 512 and n >= 1 for p, n in zip(b.prompts, b.max_tokens, strict=True))
    c = workloads.build("c", 10, 512, 4096)
    assert all(len(p) + n <= 512 for p, n in zip(c.prompts, c.max_tokens, strict=True))
    block = workloads.SCALED_BLOCK
    assert all(p[:block] == c.prompts[0][:block] for p in c.prompts)  # every Mooncake request starts with block 0
