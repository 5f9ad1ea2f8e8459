"""The Triton paged-attention kernels against plain SDPA: in Triton's interpreter on the CPU, compiled on CUDA.

Triton decides at `import triton` whether its own library functions (tl.zeros, tl.max, ...) are interpreted, so
the interpreter cannot be switched on inside this pytest process once anything imported triton. Without CUDA the
module's one test runs the module again in a child pytest with TRITON_INTERPRET=1, where the kernel cases run on
CPU tensors (`TRITON_INTERPRET=1 pytest tests/unit/engine/test_paged_kernel.py` runs them directly). With CUDA
the cases run here, compiled. Every cache slot outside the sequences' contexts holds NaN, so a kernel that reads
a padded row's table, a position past a context or a causally hidden one returns NaN instead of passing.
"""

import functools
import math
import os
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from floodway.engine import attention, step_inputs
from floodway.engine.step_inputs import SeqInput, build

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"
TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


if not INTERPRETED and DEVICE == "cpu":
    def test_kernels_in_triton_interpreter():
        pytest.importorskip("triton", reason="triton is not installed (the CPU engine image leaves it out)")
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONSAFEPATH": "1"}
        child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k",
                                "TestKernelCases or bench_dry_run"], env=env, capture_output=True, text=True,
                               timeout=300)
        assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
        assert " passed" in child.stdout and "skipped" not in child.stdout, child.stdout[-2000:]


if not INTERPRETED:
    # Representative H100/H200 constexprs: Llama-style GQA (4 query heads per KV head), head_dim 128, blocks of 16.
    COMMON = dict(BLOCK_SIZE=16, TILE_N=64, HEAD_DIM=128, D_PAD=128, PRECISION="tf32")
    PTRS = dict(part_out="*fp32", part_lse="*fp32", block_tables="*i32", context_lens="*i32", query_start="*i32")

    @pytest.mark.parametrize("name,constexprs", [
        ("_decode_kernel", dict(GROUP=4, BLOCK_M=16, SPLIT=False, **COMMON)),
        ("_decode_kernel", dict(GROUP=8, BLOCK_M=16, SPLIT=True, **COMMON)),
        ("_prefill_kernel", dict(GROUP=4, BLOCK_M=64, BLOCK_Q=16, **COMMON)),
        ("_combine_kernel", dict(S_PAD=16, HEAD_DIM=128, D_PAD=128))])
    def test_kernels_compile_for_hopper(name, constexprs):
        """What the interpreter cannot show: the kernels pass Triton's compiler down to an sm_90 cubin (its bundled
        ptxas; no GPU needed), loop-carried types, dot shapes and layouts included. bf16, the GPU default."""
        triton = pytest.importorskip("triton", reason="triton is not installed (the CPU engine image leaves it out)")
        from floodway.engine.kernels import paged_attention
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        fn = getattr(paged_attention, name)
        if "DOT" in fn.arg_names:
            constexprs = {**constexprs, "DOT": triton.language.bfloat16}
        signature = {a: "constexpr" if a in constexprs else PTRS.get(a, "fp32" if a == "qk_scale" else "i32")
                     for a in fn.arg_names}
        signature.update({a: "*bf16" for a in ("out", "q", "k_cache", "v_cache") if a in signature})
        compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                                  options={"enable_fp_fusion": paged_attention.FP_FUSION})
        assert compiled.asm["cubin"]


if INTERPRETED:
    def test_layer_bench_dry_run(capsys):
        """`python -P -m floodway.engine.bench.kernels --cpu` (the GPU session's side-by-side command; its dry run
        is this interpreter) cannot rot: every row printed, the kernel path equal to the SDPA path."""
        from floodway.engine.bench import kernels as bench

        assert bench.main(["--cpu"]) == 0
        out = capsys.readouterr().out
        rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| decode", "| prefill"))]
        assert [r[0].strip() for r in rows] == ["decode x1, context 9", "decode x1, context 16", "decode x3, context 9",
                                               "decode x3, context 16", "prefill 5 after 0", "prefill 3 after 6"]
        assert all(float(r[4]) < 1e-4 for r in rows), out


@pytest.fixture(scope="module")
def kernels():
    from floodway.engine.kernels import paged_attention

    return paged_attention


class Pool:
    """A block pool of NaN whose sequences' contexts get random K/V, each through a shuffled block table."""

    def __init__(self, ctx_lens, block_size, kv_heads, head_dim, dtype, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.bs = block_size
        need = [math.ceil(c / block_size) for c in ctx_lens]
        self.width = max(need + [1])
        num_blocks = sum(need) + 3
        ids = 1 + torch.randperm(num_blocks - 1, generator=gen)  # non-contiguous, in no order; block 0 stays NaN
        self.tables = torch.zeros(len(ctx_lens), self.width, dtype=torch.int32)  # padding entries: block 0
        self.k = torch.full((num_blocks, block_size, kv_heads, head_dim), float("nan"), dtype=dtype)
        self.v = self.k.clone()
        used = 0
        for row, (c, n) in enumerate(zip(ctx_lens, need, strict=True)):
            self.tables[row, :n] = ids[used:used + n]
            used += n
            blocks, slots = self.positions(row, c)
            self.k[blocks, slots] = torch.randn(c, kv_heads, head_dim, generator=gen).to(dtype)
            self.v[blocks, slots] = torch.randn(c, kv_heads, head_dim, generator=gen).to(dtype)
        self.ctx = torch.tensor(ctx_lens, dtype=torch.int32)

    def on_device(self):
        """(k cache, v cache, block tables, context lengths) where the kernels run."""
        return (t.to(DEVICE) for t in (self.k, self.v, self.tables, self.ctx))

    def positions(self, row, c):
        pos = torch.arange(c)
        return self.tables[row, pos // self.bs].long(), pos % self.bs

    def reference(self, row, q, scale=None):
        """SDPA in fp32 for q [n, H, D], the last n tokens of the row's context, causal."""
        c, n, heads = int(self.ctx[row]), q.shape[0], q.shape[1]
        if c == 0:
            return torch.zeros_like(q, dtype=torch.float32)
        blocks, slots = self.positions(row, c)
        k, v = (t[blocks, slots].float().transpose(0, 1) for t in (self.k, self.v))  # [KVH, c, D]
        group = heads // k.shape[0]
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        mask = torch.arange(c)[None, :] < (c - n + torch.arange(n) + 1)[:, None]
        return F.scaled_dot_product_attention(q.float().transpose(0, 1), k, v, attn_mask=mask,
                                              scale=scale).transpose(0, 1)


def _close(got, want, dtype):
    got = got.cpu()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=TOL[dtype], rtol=TOL[dtype])


# (heads, kv_heads, head_dim, block_size): GQA ratios 1, 2, 3, 4, 8; a head_dim that is no power of two
SHAPES = [(4, 4, 16, 4), (4, 2, 32, 16), (6, 2, 16, 4), (8, 2, 16, 16), (8, 1, 24, 4)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# every shape in fp32, two in bf16, one in fp16 (the interpreter is slow; on CUDA the dtypes meet the real dots)
CASES = [(*shape, torch.float32) for shape in SHAPES] + [(*SHAPES[i], dtype) for i, dtype in
                                                         ((1, torch.bfloat16), (4, torch.bfloat16), (3, torch.float16))]


def test_kernel_inputs_follow_the_packed_order():
    seqs = [SeqInput([7, 8, 9], 0, [5], True),  # prefill
            SeqInput([1], 3, [2, 9], True),  # decode, context 4: its table's spare block is left out
            SeqInput([4, 5], 4, [3, 6], False),  # prefill chunk after a cached prefix
            SeqInput([2], 9, [0, 1, 4], True)]  # decode, context 10
    meta = build(seqs, 4, [], [], "cpu", path="triton")[0]
    kin = meta.kernel
    assert meta.decodes == [] and meta.prefills == [] and kin.num_decode == 2
    assert kin.decode_tables.tolist() == [[0, 1, 4], [2, 0, 0]] and kin.decode_lens.tolist() == [10, 4]
    assert kin.prefill_tables.tolist() == [[3, 6], [5, 0]] and kin.prefill_lens.tolist() == [6, 3]
    assert kin.query_start.tolist() == [0, 2, 5]
    assert {t.dtype for t in vars(kin).values() if isinstance(t, torch.Tensor)} == {torch.int32}
    cache = [torch.zeros(8, 4, 1, 2)]
    assert build(seqs, 4, cache, cache, "cpu")[0].kernel is None  # the CPU default builds no kernel inputs


@pytest.mark.parametrize("heads,kv_heads", [(9, 3), (8, 2), (4, 4)])
def test_sdpa_path_chunks_after_a_prefix_match_causal_attention(heads, kv_heads):
    """The CPU SDPA path on chunks after a cached prefix, folded (a verify's few tokens: length x group within
    attention.FOLD_ROWS), split (from attention.SPLIT_MIN on) and neither: each equals causal attention over the
    whole context (fp32, GQA repeat)."""
    bs, head_dim, group = 4, 16, heads // kv_heads
    lengths = [attention.SPLIT_MIN + 3, attention.SPLIT_MIN, 2, 3, attention.FOLD_ROWS // group,
               attention.FOLD_ROWS // group + 1]
    chunks = [(17 - 2 * i, n) for i, n in enumerate(lengths)]  # (cached prefix, chunk length), in packed order
    pool = Pool([p + n for p, n in chunks], bs, kv_heads, head_dim, torch.float32, seed=4)
    seqs = [SeqInput([0] * n, p, pool.tables[row].tolist(), True) for row, (p, n) in enumerate(chunks)]
    meta = build(seqs, bs, [pool.k], [pool.v], "cpu", path="sdpa")[0]
    assert meta.decodes == [] and [p.length for p in meta.prefills] == lengths
    q = torch.randn(sum(lengths), heads, head_dim, generator=torch.Generator().manual_seed(5))
    # This step's K/V as the pool holds them at the chunks' positions: writing them back changes nothing.
    k, v = (torch.cat([t[pool.positions(row, p + n)][p:] for row, (p, n) in enumerate(chunks)])
            for t in (pool.k, pool.v))
    out = attention.attend(meta, 0, q, k, v, 0.3)
    for row, c in enumerate(meta.prefills):
        _close(out[c.start:c.start + c.length], pool.reference(row, q[c.start:c.start + c.length], 0.3), torch.float32)


def test_chunk_attention_bench_prints_every_row_and_both_paths_agree(capsys):
    """`python -P -m floodway.engine.bench.chunk_attention` cannot rot: a row per chunk, the shipped path (folded or
    split) equal to one masked call within float32 rounding. Its long chunks are timed twice each: seconds."""
    from floodway.engine.bench import chunk_attention as bench

    assert bench.main(["--repeat", "1", "--dtypes", "float32"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| float32")]
    assert len(rows) == len(bench.CASES)
    assert all(float(r[-1]) <= TOL[torch.float32] for r in rows), rows


class TestKernelCases:
    """Run only where triton executes kernels: in the interpreter child, or compiled on CUDA."""
    __test__ = INTERPRETED or DEVICE == "cuda"

    @pytest.mark.parametrize("heads,kv_heads,head_dim,block_size,dtype", CASES)
    def test_decode_matches_sdpa(self, kernels, heads, kv_heads, head_dim, block_size, dtype):
        # odd lengths, exactly at and one past block boundaries, one token; 0: a padded row of a captured batch
        ctx = [1, block_size - 1, block_size, block_size + 1, 2 * block_size, 37, 0]
        pool = Pool(ctx, block_size, kv_heads, head_dim, dtype)
        q = torch.randn(len(ctx), heads, head_dim).to(dtype)
        out = kernels.paged_decode(q.to(DEVICE), *pool.on_device(), 0.3)
        assert out.dtype == dtype and out.shape == q.shape
        for row in range(len(ctx)):
            _close(out[row], pool.reference(row, q[row:row + 1], 0.3)[0], dtype)
        assert not out[-1].any()

    @pytest.mark.parametrize("dtype", DTYPES[:2])
    def test_decode_split_k_matches_one_pass(self, kernels, dtype):
        """Splits merged by log-sum-exp equal one pass, including splits past a row's context (and a row of 0)."""
        ctx = [40, 17, 32, 0, 3]  # 3 splits of 16 positions; of 5, the last two lie past every context
        pool = Pool(ctx, 4, 2, 16, dtype, seed=1)
        q = torch.randn(len(ctx), 8, 16).to(dtype)
        for splits in (3, 5):
            out = kernels.paged_decode(q.to(DEVICE), *pool.on_device(), splits=splits, tile_n=16)
            for row in range(len(ctx)):
                _close(out[row], pool.reference(row, q[row:row + 1])[0], dtype)

    @pytest.mark.parametrize("heads,kv_heads,head_dim,block_size,dtype", CASES)
    def test_prefill_matches_causal_sdpa(self, kernels, heads, kv_heads, head_dim, block_size, dtype):
        # (cached prefix, chunk length): a fresh odd prompt; a chunk after a cached prefix ending on a block boundary;
        # one token after a prefix; a chunk longer than a query tile (BLOCK_Q = 16 // group) starting mid-block
        chunks = [(0, 7), (2 * block_size, block_size), (block_size + 1, 1), (3, 21)]
        pool = Pool([p + n for p, n in chunks], block_size, kv_heads, head_dim, dtype, seed=2)
        starts = [0]
        for _, n in chunks:
            starts.append(starts[-1] + n)
        q = torch.randn(starts[-1], heads, head_dim).to(dtype)
        k, v, tables, ctx = pool.on_device()
        out = kernels.paged_prefill(q.to(DEVICE), k, v, tables, torch.tensor(starts, dtype=torch.int32, device=DEVICE),
                                    ctx, None, block_m=16, tile_n=16)
        for row, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
            _close(out[a:b], pool.reference(row, q[a:b]), dtype)

    @pytest.mark.parametrize("heads,kv_heads", [(4, 2), (8, 1)])
    def test_attention_step_kernel_path_equals_sdpa_path(self, kernels, monkeypatch, heads, kv_heads):
        """One packed engine step (decodes of several lengths, a fresh prompt, a chunk after a cached prefix) through
        attention.paged_attention: the kernel metadata and kernels give what today's SDPA path gives."""
        monkeypatch.setattr(attention, "_kernels", lambda: kernels)
        bs, head_dim, gen = 4, 16, torch.Generator().manual_seed(3)
        seqs = [SeqInput([1], 12, [7, 2, 11, 4], True), SeqInput([1, 2, 3, 4, 5], 0, [0, 9], True),
                SeqInput([1], 2, [5], True), SeqInput([1, 2, 3], 5, [6, 1], True), SeqInput([1], 7, [3, 8], True)]
        tokens = sum(len(s.token_ids) for s in seqs)
        cache = torch.randn(12, bs, kv_heads, head_dim, generator=gen).to(DEVICE)  # the cached prefixes' K/V
        query, key, value = (torch.randn(1, h, tokens, head_dim, generator=gen).to(DEVICE)
                             for h in (heads, kv_heads, kv_heads))
        module = types.SimpleNamespace(layer_idx=0)
        outs = []
        for path in ("sdpa", "triton"):
            k_cache, v_cache = cache.clone(), cache.flip(0).clone()
            meta = build(seqs, bs, [k_cache], [v_cache], DEVICE, path=path)[0]
            out, _ = attention.paged_attention(module, query, key, value, None, scaling=0.25, floodway_meta=meta)
            outs.append(out)
        assert outs[0].shape == outs[1].shape == (1, tokens, heads, head_dim)
        torch.testing.assert_close(outs[1], outs[0], atol=1e-4, rtol=1e-4)

    def test_engine_generates_the_same_tokens_on_both_paths(self, tiny_model_path, run_to_end, monkeypatch):
        """The tiny model served end to end: a prompt prefilled in two chunks beside a short one's decodes, then a
        prompt whose first two blocks come from the prefix cache; the kernel path generates what the SDPA path
        generates, token for token (fp32)."""
        from floodway.engine.config import EngineConfig
        from floodway.engine.llm_engine import LLMEngine
        from floodway.engine.sampling_params import SamplingParams

        build = step_inputs.build
        params = SamplingParams(max_tokens=3, ignore_eos=True, temperature=0)

        def generate(path):
            monkeypatch.setattr(step_inputs, "build", functools.partial(build, path=path))
            eng = LLMEngine(EngineConfig(model=tiny_model_path, device=DEVICE, max_model_len=64, num_kv_blocks=8,
                                         max_num_batched_tokens=12, max_num_seqs=4))
            eng.add_request("a", list(range(10, 30)), params)
            eng.add_request("c", [5, 6, 7], params)
            out = run_to_end(eng)
            eng.add_request("b", list(range(10, 30)) + [7, 8, 9], params)
            out |= run_to_end(eng)
            assert eng.stats().prefix_cache_hits_total == 16  # b's first block
            return {rid: outs[-1].output_token_ids for rid, outs in out.items()}

        assert generate("triton") == generate("sdpa")
