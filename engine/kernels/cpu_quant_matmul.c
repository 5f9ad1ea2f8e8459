/* The CPU quantized matmul: y [M, N] bf16 = x [M, K] bf16 @ w.T, w[n, k] = (q - 2^(bits-1)) * d + z per group of
 * `group` input columns, codes q of 4 bits (0..15) or 8 (0..255), d and z bf16 (torch's int4 form, its zero z at the
 * codes' middle, small where the weights are centred, so that its bf16 rounding costs little), on AVX-512 BF16
 * (vdpbf16ps: bf16 pairs multiplied exactly, summed in float32).
 *
 * Layout (cpu_quant_matmul.py packs it): columns in tiles of 16, each tile's codes one run of 32-byte blocks.
 * - 4 bits: K/4 blocks, byte 2i+e of block b holding q(4b+e, i) in its low nibble and q(4b+2+e, i) in its high one,
 *   so one zero-extension to 16-bit lanes and a mask or a shift give the bf16 pairs (k, k+1) and (k+2, k+3) of the 16
 *   columns. A code becomes a bf16 number by or-ing in 0x4300: the bits of 128 + q, exact. The sum over a group is
 *   then S = sum x (128 + q), and y += d (S - 136 sum x) + z sum x.
 * - 8 bits: K/2 blocks, byte 2i+e of block b holding q(2b+e, i) - 128 as an int8, which widens to float32 and narrows
 *   to bf16 exactly (8 significant bits), two instructions a 16 codes; y += d S + z sum x with S = sum x (q - 128).
 *   One byte a weight, read once: int8 split into two nibble planes read the same bytes, twice the scales and zeros,
 *   and made twice the products.
 * The groups' sums of x are taken once per call.
 * Rows go in blocks of 8 (24 accumulators in registers), each block over a tile's codes while they sit in L1. A row's
 * two products of a step go to two accumulators, whatever the block's size: one chain waits on vdpbf16ps's latency,
 * and the sums, so a row's result, do not depend on how many rows a call has (a verify step's logits are a decode
 * step's). The codes are read one stream, prefetched AHEAD: the hardware's own prefetch alone read the model's codes
 * at about half the memory's pace (docs/benchmarks/2026-12-07-cpu-kernels.md, 2026-12-07-int4-prefetch.md). */
#include "cpu.h"

#if HAVE_KERNELS
#define TILE 16
#define ROWS 8
#define AHEAD 8192   /* bytes of codes prefetched ahead (6-10 KB best of 1-16 KB; the next tiles' codes follow) */
#define AHEAD_TILES 2 /* tiles whose scales and zeros are prefetched ahead */

/* 32 int8 codes as bf16 numbers, byte j to element j. */
static inline AVX512 __m512bh widen_int8(const int8_t* p) {
    const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p + 16))));
    return _mm512_cvtne2ps_pbh(b, a);
}

/* One tile of 16 columns for `nr` (<= ROWS) rows; inlined for each constant nr and bits so the loops unroll. z NULL:
 * no zeros (8 bits only: symmetric codes such as Q8_0's). */
static inline AVX512 __attribute__((always_inline)) void tile(const uint16_t* x, const float* sx, const uint8_t* w,
                                                              const uint16_t* d, const uint16_t* z, uint16_t* y,
                                                              int nr, int bits, int K, int N, int group, int cols) {
    const int groups = K / group, bytes_per_k = bits * TILE / 8; /* code bytes per input column of the tile */
    const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
    const __m512 offset = _mm512_set1_ps(136.0f);
    __m512 out[ROWS], acc[ROWS], acc2[ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) out[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) acc[r] = acc2[r] = _mm512_setzero_ps();
        for (int k = g * group; k < (g + 1) * group; k += 4) {
            const uint8_t* at = w + (size_t)k * bytes_per_k;
            __m512bh lo, hi; /* the bf16 pairs (k, k+1) and (k+2, k+3) of the 16 columns */
            if (bits == 4) {
                if (!(k & 4)) _mm_prefetch((const char*)at + AHEAD, _MM_HINT_T0); /* once a 64-byte line */
                __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)at));
                lo = (__m512bh)_mm512_ternarylogic_epi32(c, low, bias, 0xEA); /* (c & low) | bias */
                hi = (__m512bh)_mm512_or_si512(_mm512_srli_epi16(c, 4), bias);
            } else {
                _mm_prefetch((const char*)at + AHEAD, _MM_HINT_T0);
                lo = widen_int8((const int8_t*)at);
                hi = widen_int8((const int8_t*)at + 32);
            }
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const int32_t* xr = (const int32_t*)(x + (size_t)r * K + k);
                acc[r] = _mm512_dpbf16_ps(acc[r], lo, (__m512bh)_mm512_set1_epi32(xr[0]));
                acc2[r] = _mm512_dpbf16_ps(acc2[r], hi, (__m512bh)_mm512_set1_epi32(xr[1]));
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) acc[r] = _mm512_add_ps(acc[r], acc2[r]);
        const __m512 dg = widen_bf16(_mm256_loadu_si256((const __m256i*)(d + g * TILE)));
        const __m512 zg = z ? widen_bf16(_mm256_loadu_si256((const __m256i*)(z + g * TILE))) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 s = _mm512_set1_ps(sx[(size_t)r * groups + g]);
            out[r] = _mm512_fmadd_ps(dg, bits == 4 ? _mm512_fnmadd_ps(offset, s, acc[r]) : acc[r], out[r]);
            if (z) out[r] = _mm512_fmadd_ps(zg, s, out[r]);
        }
    }
    const __mmask16 mask = tail(cols);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
        _mm256_mask_storeu_epi16(y + (size_t)r * N, mask, (__m256i)_mm512_cvtneps_pbh(out[r]));
}

#define ROW_BLOCKS(BITS)                                                                            \
    switch (M - r0 < ROWS ? M - r0 : ROWS) {                                                        \
        case 1: tile(xr, sr, wt, dt, zt, yr, 1, BITS, K, N, group, cols); break;                    \
        case 2: tile(xr, sr, wt, dt, zt, yr, 2, BITS, K, N, group, cols); break;                    \
        case 3: tile(xr, sr, wt, dt, zt, yr, 3, BITS, K, N, group, cols); break;                    \
        case 4: tile(xr, sr, wt, dt, zt, yr, 4, BITS, K, N, group, cols); break;                    \
        case 5: tile(xr, sr, wt, dt, zt, yr, 5, BITS, K, N, group, cols); break;                    \
        case 6: tile(xr, sr, wt, dt, zt, yr, 6, BITS, K, N, group, cols); break;                    \
        case 7: tile(xr, sr, wt, dt, zt, yr, 7, BITS, K, N, group, cols); break;                    \
        default: tile(xr, sr, wt, dt, zt, yr, 8, BITS, K, N, group, cols); break;                   \
    }

AVX512 void quant_matmul(const uint16_t* x, const uint8_t* w, const uint16_t* d, const uint16_t* z, uint16_t* y,
                         int M, int N, int K, int group, int bits, int threads, float* sx) {
    const int groups = K / group, tiles = (N + TILE - 1) / TILE;
    for (int r = 0; r < M; r++)
        for (int g = 0; g < groups; g++) {
            float s = 0;
            for (int k = g * group; k < (g + 1) * group; k++) {
                uint32_t b = (uint32_t)x[(size_t)r * K + k] << 16;
                float f;
                __builtin_memcpy(&f, &b, 4);
                s += f;
            }
            sx[(size_t)r * groups + g] = s;
        }
    const int scale_bytes = groups * TILE * 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int t = 0; t < tiles; t++) {
        const uint8_t* wt = w + (size_t)t * K * bits * TILE / 8;
        const uint16_t *dt = d + (size_t)t * groups * TILE, *zt = z ? z + (size_t)t * groups * TILE : NULL;
        for (int i = 0; i < scale_bytes; i += 64) {
            _mm_prefetch((const char*)dt + AHEAD_TILES * scale_bytes + i, _MM_HINT_T0);
            if (zt) _mm_prefetch((const char*)zt + AHEAD_TILES * scale_bytes + i, _MM_HINT_T0);
        }
        for (int r0 = 0; r0 < M; r0 += ROWS) {
            const uint16_t* xr = x + (size_t)r0 * K;
            const float* sr = sx + (size_t)r0 * groups;
            uint16_t* yr = y + (size_t)r0 * N + (size_t)t * TILE;
            const int cols = N - t * TILE;
            if (bits == 4) {
                ROW_BLOCKS(4)
            } else {
                ROW_BLOCKS(8)
            }
        }
    }
}
#endif
