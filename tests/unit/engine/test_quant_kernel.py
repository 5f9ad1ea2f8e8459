"""The Triton dequantizing GEMM against x @ w.T of the dequantized weight: in Triton's interpreter on the CPU (a
child pytest with TRITON_INTERPRET=1, as test_paged_kernel.py explains), compiled on CUDA, and compiled for sm_90
without a GPU. Weights from the `gguf` package's own quantizers, random K-quant blocks (tests/gguf_blocks.py) and
our round-to-nearest."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"


if not INTERPRETED and DEVICE == "cpu":
    def test_kernel_in_triton_interpreter():
        pytest.importorskip("triton", reason="triton is not installed (the CPU engine image leaves it out)")
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONSAFEPATH": "1"}
        child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k",
                                "cases"], env=env, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
        assert " passed" in child.stdout and "skipped" not in child.stdout, child.stdout[-2000:]

    @pytest.mark.parametrize("bits,e4m3,group", [(4, False, 32), (8, False, 32), (8, True, 32), (8, False, 16),
                                                 (4, False, 16)])
    def test_kernel_compiles_for_hopper(bits, e4m3, group):
        """What the interpreter cannot show: the kernel passes Triton's compiler down to an sm_90 cubin (its bundled
        ptxas; no GPU needed). bf16, the GPU default."""
        triton = pytest.importorskip("triton", reason="triton is not installed (the CPU engine image leaves it out)")
        from floodway.engine.kernels import quant_matmul
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        fn = quant_matmul._kernel
        constexprs = dict(BITS=bits, GROUP=group, HAS_BIAS=True, DOT=triton.language.bfloat16, PRECISION="tf32",
                          BLOCK_M=16, BLOCK_N=64, BLOCK_K=min(group, 64), E4M3=e4m3)
        ptrs = {"x": "*bf16", "codes": "*u8", "scales": "*fp32", "mins": "*fp32", "bias": "*bf16", "out": "*bf16"}
        signature = {a: "constexpr" if a in constexprs else ptrs.get(a, "i32") for a in fn.arg_names}
        compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
        assert compiled.asm["cubin"]


def _weight(kind: str, n: int, k: int, seed: int):
    from floodway.engine.quant import weights
    from floodway.engine.quant.gguf_weights import decode

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    if kind in ("int4", "int8"):
        return weights.rtn(torch.from_numpy(w), int(kind[3:]))
    if kind == "fp8":  # one scale per row, served in groups of 64 as linear.make does
        return weights.regroup(weights.fp8(torch.from_numpy(w)), 64)
    gguf = pytest.importorskip("gguf")
    qtype = gguf.GGMLQuantizationType[kind]
    raw = gguf.quants.quantize(w, qtype)
    return decode(raw.reshape(n, k // 32, raw.shape[1] // (k // 32)), kind)


@pytest.mark.skipif(DEVICE == "cpu" and not INTERPRETED, reason="runs in the interpreter child on CPU")
class TestKernelCases:
    @pytest.mark.parametrize("kind", ["Q4_1", "Q8_0", "int4", "int8", "Q4_0", "fp8"])
    @pytest.mark.parametrize("m,n,k", [(1, 96, 64), (33, 70, 128)])  # decode and prefill tiles; ragged N
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_cases_match_the_dequantized_weight(self, kind, m, n, k, dtype):
        from floodway.engine.kernels import quant_matmul

        qw = _weight(kind, n, k, seed=m + n)
        bias = torch.randn(n)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(dtype)
        codes = quant_matmul.pack_codes(qw.codes, qw.bits).to(DEVICE)
        got = quant_matmul.matmul(x.to(DEVICE), codes, qw.scales.to(DEVICE), qw.mins.to(DEVICE), qw.bits, qw.group,
                                  bias.to(DEVICE, dtype), qw.e4m3).cpu().float()
        want = x.float() @ qw.dequantize().T + bias.to(dtype).float()
        tol = 1e-4 if dtype == torch.float32 else 2e-2  # bf16: the dequantized tile and output rounded to 2^-8
        assert (got - want).abs().max().item() <= tol * want.abs().max().item()

    @pytest.mark.parametrize("kind", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
    def test_cases_k_quants_match_the_dequantized_weight(self, kind):
        """K-quant blocks (random, dequantized by the gguf package) as the engine serves them on CUDA: Q6_K in its
        own groups of 16, as Q2_K and Q3_K."""
        from floodway.engine.quant import linear
        from floodway.engine.quant.gguf_weights import decode

        from tests.gguf_blocks import random_blocks

        pytest.importorskip("gguf")
        blocks, reference = random_blocks(kind, 40, 256, seed=6)
        qw = decode(blocks, kind)
        x = torch.randn(3, 256, generator=torch.Generator().manual_seed(7))
        got = linear.TritonLinear(qw, None, torch.device(DEVICE), torch.float32)(x.to(DEVICE)).cpu()
        want = x @ torch.from_numpy(reference).T
        assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()

    def test_cases_wrong_group_is_caught(self):
        from floodway.engine.kernels import quant_matmul

        qw = _weight("Q4_1", 64, 128, seed=1)
        x = torch.randn(3, 128)
        codes = quant_matmul.pack_codes(qw.codes, 4).to(DEVICE)
        got = quant_matmul.matmul(x.to(DEVICE), codes, qw.scales[:, ::2].contiguous().to(DEVICE),
                                  qw.mins[:, ::2].contiguous().to(DEVICE), 4, 64).cpu()
        want = x @ qw.dequantize().T
        assert (got - want).abs().max().item() > 0.05 * want.abs().max().item()

    @pytest.mark.parametrize("kind", ["act-order", "fp8"])
    def test_cases_checkpoint_weights_through_the_linear(self, kind):
        """What the engine builds on CUDA for a GPTQ act-order weight (codes in permuted input order) and an FP8 one
        (one scale per row, served in groups of 64 by linear.make's rule)."""
        from floodway.engine.quant import linear, weights

        if kind == "fp8":
            qw = weights.fp8(torch.randn(70, 192, generator=torch.Generator().manual_seed(3)))
            served = weights.regroup(qw, linear.served_group(qw.group))
        else:
            w = _weight("int4", 70, 192, seed=3)
            perm = torch.randperm(192, generator=torch.Generator().manual_seed(4))
            qw = served = weights.QuantWeight(w.codes, w.scales, w.mins, 4, 32, "GPTQ int4", perm)
        x = torch.randn(5, 192, generator=torch.Generator().manual_seed(5))
        got = linear.TritonLinear(served, None, torch.device(DEVICE), torch.float32)(x.to(DEVICE)).cpu()
        want = x @ qw.dequantize().T
        assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
