"""y = x @ w.T (+ bias) for a group-wise quantized w (`quant.weights.QuantWeight`), dequantized tile by tile inside
the GEMM (Triton): weights cross memory as 4- or 8-bit codes, never as a float copy.

Codes: int4 two per byte along the input (element 2j in the low nibble of byte j, 2j + 1 in the high one), int8
one per byte; scales and mins float32 [out, in // group]. Each K tile lies inside one group (BLOCK_K divides the
group), so a tile loads one scale and one min per output column. E4M3: 8-bit codes that are FP8 E4M3 bit patterns,
decoded with integer ops (sign and the low 7 bits moved into an fp16's, times 2^8 for the exponent bias: exact,
subnormals included) rather than Triton's fp8 type, which the interpreter and pre-Hopper GPUs lack.
"""

import torch
import triton
import triton.language as tl

_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [N, K] -> the kernel's layout (int4: [N, K / 2])."""
    if bits == 8:
        return codes.contiguous()
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()


@triton.jit
def _kernel(x, codes, scales, mins, bias, out, M, N, K, stride_xm, stride_cn, stride_sn, stride_om,
            BITS: tl.constexpr, GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, E4M3: tl.constexpr = False):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        a = tl.load(x + rm[:, None] * stride_xm + k[None, :], mask=m_ok[:, None], other=0.0)
        if BITS == 4:
            byte = tl.load(codes + rn[None, :] * stride_cn + (k // 2)[:, None], mask=n_ok[None, :], other=0)
            q = (byte >> ((k % 2) * 4)[:, None].to(tl.uint8)) & 15
        else:
            q = tl.load(codes + rn[None, :] * stride_cn + k[:, None], mask=n_ok[None, :], other=0)
        g = k0 // GROUP
        s = tl.load(scales + rn * stride_sn + g, mask=n_ok, other=0.0)
        mn = tl.load(mins + rn * stride_sn + g, mask=n_ok, other=0.0)
        if E4M3:
            h = q.to(tl.uint16)
            half = (((h & 0x80) << 8) | ((h & 0x7F) << 7)).to(tl.float16, bitcast=True)
            v = half.to(tl.float32) * 256.0
        else:
            v = q.to(tl.float32)
        w = v * s[None, :] + mn[None, :]  # [BLOCK_K, BLOCK_N]
        acc += tl.dot(a.to(DOT), w.to(DOT), input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(out + rm[:, None] * stride_om + rn[None, :], acc.to(out.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def matmul(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, bits: int, group: int,
           bias: torch.Tensor | None = None, e4m3: bool = False) -> torch.Tensor:
    """x [..., K] -> [..., N]; codes as `pack_codes` lays them out (e4m3: FP8 E4M3 bit patterns, 8 bits)."""
    shape = x.shape
    x = x.reshape(-1, shape[-1]).contiguous()
    m, k = x.shape
    n = codes.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    block_m = 16 if m <= 16 else 64
    block_k = min(group, 64)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, 64))
    # the interpreter (CPU tensors) has no bf16 matmul: it multiplies in fp32
    dot = tl.float32 if x.dtype == torch.float32 or not x.is_cuda else _TL_DTYPES[x.dtype]
    _kernel[grid](x, codes, scales, mins, bias if bias is not None else out, out, m, n, k, x.stride(0),
                  codes.stride(0), scales.stride(0), out.stride(0), BITS=bits, GROUP=group, HAS_BIAS=bias is not None,
                  DOT=dot, PRECISION="ieee" if dot == tl.float32 else "tf32", BLOCK_M=block_m, BLOCK_N=64,
                  BLOCK_K=block_k, E4M3=e4m3)
    return out.reshape(*shape[:-1], n)
