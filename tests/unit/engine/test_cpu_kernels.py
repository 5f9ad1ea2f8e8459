"""Our CPU kernels (engine/kernels/cpu_*.c). The quantized matmul, 4- and 8-bit codes, with float32 products and with
bf16 pairs (each CPU runs one, both run on any with AVX-512 BF16), against x @ w.T of the dequantized weight in
float32, on the shapes its code treats apart: every remainder of its blocks of 8 rows, column counts that are not
whole tiles of 16 (the last tile's stores masked), each group size the CPU path serves, 8-bit codes without zeros
(Q8_0's), and more than one thread; and a row's result the same bits whatever the call's row count (a speculative
verify's logits are a decode's). (The LoRA kernel: tests/unit/engine/test_lora_rules.py.)"""

import pytest
import torch
from floodway.engine.kernels import cpu
from floodway.engine.kernels import cpu_quant_matmul as qmm

pytestmark = pytest.mark.skipif(not cpu.available(), reason="this CPU has no AVX-512 BF16 (or no C compiler "
                                                                  "built the kernels): torch's kernels serve")


def _case(n: int, k: int, group: int, bits: int = 4, seed: int = 0, zeros: bool = True, fma: bool = qmm.FMA):
    """The kernel's arguments for random codes, scales and zeros (none: all zero, not passed), and the float weight."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (n, k), generator=g, dtype=torch.uint8)
    scales = torch.rand(n, k // group, generator=g) * 0.02 * 16 / (1 << bits)
    zs = (torch.rand(n, k // group, generator=g) - 0.5) * 0.02 * zeros
    packed, ps, pz = qmm.pack(codes, scales, zs, bits)
    # the reference uses the scales the kernel holds (bf16), so what is left is the sum's and the output's rounding
    s, z = (v.to(torch.bfloat16).float().repeat_interleave(group, 1) for v in (scales, zs))
    kept = (packed, ps, pz)  # the tensors the addresses point into
    return qmm.args(packed, ps, pz if zeros else None, n, bits, fma), (codes.float() - (1 << bits - 1)) * s + z, kept


def test_float32_products_on_intel_bf16_pairs_elsewhere():
    assert qmm.float32_products("intel") and not qmm.float32_products("amd") and not qmm.float32_products("")


@pytest.mark.parametrize("n", [16, 40, 100])
@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("bits,zeros", [(4, True), (8, True), (8, False)])
@pytest.mark.parametrize("fma", [True, False], ids=["float32", "bf16-pairs"])
def test_every_row_block_remainder_and_partial_tile(n, group, bits, zeros, fma):
    k = 2 * 256
    weight, w, _kept = _case(n, k, group, bits, zeros=zeros, fma=fma)
    x = torch.randn(17, k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    alone = torch.cat([qmm.matmul(x[r:r + 1], weight) for r in range(17)])
    for rows in range(1, 18):  # 1..8 in one block; 9..17 a whole block and a remainder
        got = qmm.matmul(x[:rows], weight)
        want = x[:rows].float() @ w.T
        assert got.shape == (rows, n)
        assert ((got.float() - want).abs() <= 2 ** -7 * want.abs() + 1e-3 * want.abs().max()).all(), rows
        assert torch.equal(got, alone[:rows]), rows


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("fma", [True, False], ids=["float32", "bf16-pairs"])
def test_threads_split_the_tiles_and_agree(monkeypatch, bits, fma):
    weight, _, _kept = _case(200, 192, 32, bits, fma=fma)
    x = torch.randn(9, 192).to(torch.bfloat16)
    one = qmm.matmul(x, weight)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert torch.equal(qmm.matmul(x, weight), one)


def test_leading_dims_and_no_rows():
    weight, w, _kept = _case(32, 64, 32)
    x = torch.randn(2, 3, 64).to(torch.bfloat16)
    y = qmm.matmul(x, weight)
    assert y.shape == (2, 3, 32) and torch.allclose(y.float(), x.float() @ w.T, rtol=2e-2, atol=1e-2)
    assert qmm.matmul(x[:0], weight).shape == (0, 3, 32)
    assert torch.equal(qmm.matmul(x.float()[0], weight), y[0])  # float32 rows are rounded to bf16 first
    with pytest.raises(ValueError, match="32 input columns with a weight of 64"):
        qmm.matmul(x[..., :32], weight)
    with pytest.raises(ValueError, match="4-bit codes need their zeros"):
        qmm.args(*_kept[:2], None, 32, 4)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("fma", [True, False], ids=["float32", "bf16-pairs"])
def test_a_misplaced_code_fails_the_comparison(bits, fma):
    """The packing's pairs are what the kernel's dot products read: 4-bit codes with the two nibbles of each byte
    swapped (pairs (k, k+1) and (k+2, k+3) exchanged), or 8-bit ones with the two bytes of each pair swapped, give
    wrong sums."""
    weight, w, (packed, scales, zeros) = _case(32, 64, 32, bits, seed=3, fma=fma)
    swapped = (packed >> 4) | (packed << 4) if bits == 4 else packed.view(-1, 2).flip(1).reshape(packed.shape)
    x = torch.randn(2, 64).to(torch.bfloat16)
    want = x.float() @ w.T
    for codes, agrees in ((packed, True), (swapped.contiguous(), False)):
        got = qmm.matmul(x, qmm.args(codes, scales, zeros, 32, bits, fma)).float()
        assert torch.allclose(got, want, rtol=2e-2, atol=2e-2) == agrees


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (4, 4, 40), (8, 2, 128)])
@pytest.mark.parametrize("threads,head_major", [(1, True), (2, True), (1, False)])
def test_paged_attention_equals_causal_sdpa_over_each_context(dtype, heads, kv_heads, dim, threads, head_major):
    """Sequences of 1 to 9 rows (decodes, a verify's drafts) after contexts of 1 to 300 positions, in blocks scattered
    over the pool, GQA and not, head sizes not a multiple of 16, the engine's head-major caches and plain contiguous
    ones: the call writes the step's new keys and values at their slots, and each row equals SDPA over its sequence's
    first ctx - rows + i + 1 positions, within bf16 rounding (float32: 1e-5)."""
    from floodway.engine import attention
    from floodway.engine.kernels import cpu_attention
    from floodway.engine.kv_cache import KVShape, allocate

    g = torch.Generator().manual_seed(0)
    block_size, num_blocks = 16, 64
    (k_cache,), (v_cache,) = allocate(KVShape(1, kv_heads, dim, block_size, dtype), num_blocks, torch.device("cpu"))
    k_cache.copy_(torch.randn(k_cache.shape, generator=g))
    v_cache.copy_(torch.randn(v_cache.shape, generator=g))
    if not head_major:
        k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    shapes = [(1, 1), (1, 17), (5, 5), (9, 150), (1, 300), (3, 33)]  # (rows, context)
    width = max(-(-c // block_size) for _, c in shapes)
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables, seqs, start = [], [], 0
    for rows, ctx in shapes:
        need = -(-ctx // block_size)
        tables.append(order[:need] + [0] * (width - need))
        order = order[need:]
        seqs.append((start, rows, ctx))
        start += rows
    q = torch.randn(start, heads, dim, generator=g).to(dtype)
    out = torch.empty_like(q)
    # Each sequence's rows are its newest tokens: their keys and values come as the step's new rows (rows of a wider
    # tensor, as a fused qkv projection's are), zeroed in the caches first, and the call writes them back.
    slots = torch.cat([torch.tensor(table)[pos // block_size] * block_size + pos % block_size
                       for (_, rows, ctx), table in zip(seqs, tables, strict=True)
                       for pos in [torch.arange(ctx - rows, ctx)]])
    new = []
    for cache in (k_cache, v_cache):
        wide = torch.zeros(start, kv_heads * dim + 8, dtype=dtype)
        wide[:, :kv_heads * dim] = cache.view(-1, kv_heads, dim)[slots].reshape(start, -1)
        cache.view(-1, kv_heads, dim)[slots] = 0
        new.append(wide[:, :kv_heads * dim].view(start, kv_heads, dim))
    rows = attention.CpuRows(torch.tensor(seqs, dtype=torch.int32), torch.tensor(tables, dtype=torch.int32),
                             max(c for _, c in shapes), False)
    torch.set_num_threads(threads)
    try:
        cpu_attention.attend(q, *new, slots, k_cache, v_cache, out, rows, dim ** -0.5)
    finally:
        torch.set_num_threads(1)
    for cache, rows_in in zip((k_cache, v_cache), new, strict=True):
        assert torch.equal(cache.view(-1, kv_heads, dim)[slots], rows_in)
    for (first, rows, ctx), table in zip(seqs, tables, strict=True):
        pos = torch.arange(ctx)
        slots = torch.tensor(table)[pos // block_size] * block_size + pos % block_size
        k = k_cache.reshape(-1, kv_heads, dim)[slots].float().transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v_cache.reshape(-1, kv_heads, dim)[slots].float().transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        mask = pos[None, :] <= torch.arange(ctx - rows, ctx)[:, None]
        want = torch.nn.functional.scaled_dot_product_attention(q[first:first + rows].float().transpose(0, 1), k, v,
                                                                attn_mask=mask).transpose(0, 1)
        got = out[first:first + rows].float()
        tol = 1e-5 if dtype == torch.float32 else 2 ** -7
        assert ((got - want).abs() <= tol * (1 + want.abs())).all(), (rows, ctx, (got - want).abs().max())


def test_attention_bench_prints_every_row_and_both_paths_agree(capsys):
    """`python -P -m floodway.engine.bench.cpu_attention` cannot rot: a row per step, our kernel equal to the SDPA
    path within float32 rounding."""
    from floodway.engine.bench import cpu_attention as bench

    assert bench.main(["--repeat", "1", "--dtypes", "float32"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| float32")]
    assert len(rows) == len(bench.CASES)
    assert all(float(r[-1]) <= 1e-4 for r in rows), rows


def test_int4_bench_prints_each_shape_and_the_model_step(capsys):
    """`python -P -m floodway.engine.bench.int4_matmul --model-step` cannot rot: a row per shape with the three kernels'
    errors at bf16's scale, and the model step over SmolLM2's 66 MB of 4-bit layer codes and ~113 MB of 8-bit ones
    (one byte a weight, a bf16 scale per 32, no zeros)."""
    from floodway.engine.bench import int4_matmul as bench

    assert bench.main(["--rows", "1", "--repeat", "2", "--model-step"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shapes = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and " x " in line][1:]  # no header
    assert len(shapes) == len(bench.SHAPES) and all(float(e) < 2 ** -6 for r in shapes for e in r[-3:]), \
        shapes
    step = {int(r[0]): float(r[7]) for r in (line.split("|")[1:-1] for line in lines) if r and r[1].strip() == "1"
            and r[0].strip() in ("4", "8")}
    assert 60 < step[4] < 72 and 105 < step[8] < 120, step  # MB a pass reads


@pytest.mark.parametrize("n", [64, 576, 960, 2048, 4096, 8192])
def test_rms_norm_gives_torchs_bits(n):
    """The one-call RMSNorm equals F.rms_norm bit for bit (its sum of squares in torch's cascade order) on rows of
    every scale, at the widths of SmolLM2 (576) and larger models, and the load check takes it there."""
    from floodway.engine.kernels import cpu_norm

    g = torch.Generator().manual_seed(n)
    w = (torch.randn(n, generator=g) * 0.3 + 1).to(torch.bfloat16)
    x = (torch.randn(1000, n, generator=g) * torch.logspace(-4, 4, 1000)[:, None]).to(torch.bfloat16)
    assert torch.equal(cpu_norm.rms_norm(x, w, 1e-5), torch.nn.functional.rms_norm(x, (n,), w, 1e-5))
    assert cpu_norm.for_width(w, 1e-5) is cpu_norm.rms_norm


def test_rms_norm_in_another_order_is_refused_at_load(monkeypatch):
    """A kernel that sums in another order (here, in float64, then rounded) moves some outputs by one bf16 rounding:
    the load check sees it and the model keeps F.rms_norm; so do float32 weights and widths the kernel does not take."""
    from floodway.engine.kernels import cpu_norm

    def other_order(x, w, eps):
        r = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps).float()
        return (x.float() * r * w.float()).to(torch.bfloat16)

    w = (torch.randn(576, generator=torch.Generator().manual_seed(0)) * 0.3 + 1).to(torch.bfloat16)
    monkeypatch.setattr(cpu_norm, "rms_norm", other_order)
    assert cpu_norm.for_width(w, 1e-5) is None
    monkeypatch.undo()
    assert cpu_norm.for_width(w.float(), 1e-5) is None and cpu_norm.for_width(w[:48], 1e-5) is None


@pytest.mark.parametrize("rows,heads,head_dim", [(1, 12, 64), (7, 12, 64), (33, 40, 128), (3, 8, 96)])
def test_rope_gives_the_torch_ops_bits(rows, heads, head_dim):
    """The one-call RoPE equals the decoder's torch ops (llama.torch_rope: x * cos, then addcmul with x's halves
    swapped times sin) bit for bit, on rows of a fused qkv projection (a stride wider than the heads), at every
    scale; and the decoder takes it only where it runs: bf16 on CPU, head sizes of whole 16-lane halves."""
    from floodway.engine.kernels import cpu_rope
    from floodway.engine.models.llama import torch_rope

    g = torch.Generator().manual_seed(head_dim)
    qkv = (torch.randn(rows, (heads + 3) * head_dim, generator=g) * torch.logspace(-3, 3, rows)[:, None]) \
        .to(torch.bfloat16)
    x = qkv[:, :heads * head_dim].view(rows, heads, head_dim)
    cos, sin = (torch.randn(rows, 1, head_dim, generator=g).to(torch.bfloat16) for _ in range(2))
    assert torch.equal(cpu_rope.rope(x, cos, sin), torch_rope(x, cos, sin))
    assert cpu_rope.for_head_dim(head_dim, torch.bfloat16, torch.device("cpu")) is cpu_rope.rope
    assert cpu_rope.for_head_dim(head_dim, torch.float32, torch.device("cpu")) is None
    assert cpu_rope.for_head_dim(head_dim + 16, torch.bfloat16, torch.device("cpu")) is None
