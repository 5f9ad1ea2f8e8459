/* The CPU quantized matmul: y [M, N] bf16 = x [M, K] bf16 @ w.T, w[n, k] = (q - 2^(bits-1)) * d + z per group of
 * `group` input columns, codes q of 4 bits (0..15) or 8 (0..255), d and z bf16 (torch's int4 form, its zero z at the
 * codes' middle, small where the weights are centred, so that its bf16 rounding costs little), on AVX-512: products as
 * bf16 pairs (vdpbf16ps: multiplied exactly, summed in float32) or as float32 (vfmadd231ps, each rounded once), the
 * caller's choice per CPU (cpu_quant_matmul.float32_products).
 *
 * Layout (cpu_quant_matmul.py packs it): columns in tiles of 16, each tile's codes one run of 32-byte blocks.
 * - 4 bits: K/4 blocks, byte 2i+e of block b holding q(4b+e, i) in its low nibble and q(4b+2+e, i) in its high one,
 *   so one zero-extension to 16-bit lanes and a mask or a shift give the bf16 pairs (k, k+1) and (k+2, k+3) of the 16
 *   columns. A code becomes a bf16 number by or-ing in 0x4300: the bits of 128 + q, exact. The sum over a group is
 *   then S = sum x (128 + q), and y += d (S - 136 sum x) + z sum x. As float32 (`columns`) S = sum x (q - 8).
 * - 8 bits: K/2 blocks, byte 2i+e of block b holding q(2b+e, i) - 128 as an int8, which widens to float32 and narrows
 *   to bf16 exactly (8 significant bits), two instructions a 16 codes; y += d S + z sum x with S = sum x (q - 128).
 *   One byte a weight, read once: int8 split into two nibble planes read the same bytes, twice the scales and zeros,
 *   and made twice the products.
 * The groups' sums of x are taken once per call.
 * Rows go in blocks of 8, each block over a tile's codes while they sit in L1. A row's products of a step go to two
 * accumulators (bf16 pairs) or four (float32: two chains held one row to 0.95x the pairs' pace, and a block of 8 rows
 * spills a few, which cost a five-row verify 2%), whatever the block's size: one chain waits on the instruction's
 * latency, and the sums, so a row's result, do not depend on how many rows a call has (a verify step's logits are a
 * decode step's). The codes are read one stream, prefetched AHEAD: the hardware's own prefetch alone read the model's
 * codes at about half the memory's pace (docs/benchmarks/2026-12-07-cpu-kernels.md, 2026-12-07-int4-prefetch.md). */
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

/* The bf16 pairs (k, k+1) and (k+2, k+3) of the tile's 16 columns, for vdpbf16ps. */
static inline AVX512 void pairs(const uint8_t* at, int bits, __m512bh* lo, __m512bh* hi) {
    if (bits == 4) {
        const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)at));
        const __m512i bias = _mm512_set1_epi16(0x4300);
        *lo = (__m512bh)_mm512_ternarylogic_epi32(c, _mm512_set1_epi16(0x000F), bias, 0xEA); /* (c & 0xF) | bias */
        *hi = (__m512bh)_mm512_or_si512(_mm512_srli_epi16(c, 4), bias);
    } else {
        *lo = widen_int8((const int8_t*)at);
        *hi = widen_int8((const int8_t*)at + 32);
    }
}

/* The codes of columns k..k+3 of the tile's 16 columns as float32 q - 2^(bits-1), v[j] lane i = column k + j of output
 * i. 4 bits: as 16-bit words, word i = bytes 2i, 2i+1 holds q(k, i), q(k+2, i), q(k+1, i), q(k+3, i) from its low
 * nibble up, and vpermps reads the low 4 bits of each lane as an index into the table of q - 8. 8 bits: the words of
 * each 32-byte block hold q(k, i) - 128 low and q(k+1, i) - 128 high. */
static inline AVX512 void columns(const uint8_t* at, int bits, __m512 v[4]) {
    if (bits == 4) {
        const __m512 table = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
        const __m512i c = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)at));
        v[0] = _mm512_permutexvar_ps(c, table);
        v[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), table);
        v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 8), table);
        v[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 12), table);
    } else {
        for (int h = 0; h < 2; h++) {
            const __m512i c = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)(at + 32 * h)));
            v[2 * h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(c, 24), 24));
            v[2 * h + 1] = _mm512_cvtepi32_ps(_mm512_srai_epi32(c, 8));
        }
    }
}

/* One tile of 16 columns for `nr` (<= ROWS) rows; inlined for each constant nr, bits and fma so the loops unroll. z
 * NULL: no zeros (8 bits only: symmetric codes such as Q8_0's). fma: float32 products (x as float32 in xf), where
 * vdpbf16ps runs at half the multiply-adds of vfmadd231ps (cpu_quant_matmul.float32_products). */
static inline AVX512 __attribute__((always_inline)) void tile(const uint16_t* x, const float* xf, const float* sx,
                                                              const uint8_t* w, const uint16_t* d, const uint16_t* z,
                                                              uint16_t* y, int nr, int bits, int fma, int K, int N,
                                                              int group, int cols) {
    const int groups = K / group, bytes_per_k = bits * TILE / 8; /* code bytes per input column of the tile */
    /* The bf16 sums S are of x (128 + q) at 4 bits: take 136 sum x off; the float32 ones are of x (q - 8) already. */
    const int biased = bits == 4 && !fma;
    const __m512 offset = _mm512_set1_ps(136.0f);
    __m512 out[ROWS], acc[ROWS], acc2[ROWS], acc3[ROWS], acc4[ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) out[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) acc[r] = acc2[r] = acc3[r] = acc4[r] = _mm512_setzero_ps();
        for (int k = g * group; k < (g + 1) * group; k += 4) {
            const uint8_t* at = w + (size_t)k * bytes_per_k;
            if (bits == 8 || !(k & 4)) _mm_prefetch((const char*)at + AHEAD, _MM_HINT_T0); /* once a 64-byte line */
            if (fma) {
                __m512 v[4];
                columns(at, bits, v);
#pragma GCC unroll 8
                for (int r = 0; r < nr; r++) {
                    const float* xr = xf + (size_t)r * K + k;
                    acc[r] = _mm512_fmadd_ps(v[0], _mm512_set1_ps(xr[0]), acc[r]);
                    acc2[r] = _mm512_fmadd_ps(v[1], _mm512_set1_ps(xr[1]), acc2[r]);
                    acc3[r] = _mm512_fmadd_ps(v[2], _mm512_set1_ps(xr[2]), acc3[r]);
                    acc4[r] = _mm512_fmadd_ps(v[3], _mm512_set1_ps(xr[3]), acc4[r]);
                }
            } else {
                __m512bh lo, hi;
                pairs(at, bits, &lo, &hi);
#pragma GCC unroll 8
                for (int r = 0; r < nr; r++) {
                    const int32_t* xr = (const int32_t*)(x + (size_t)r * K + k);
                    acc[r] = _mm512_dpbf16_ps(acc[r], lo, (__m512bh)_mm512_set1_epi32(xr[0]));
                    acc2[r] = _mm512_dpbf16_ps(acc2[r], hi, (__m512bh)_mm512_set1_epi32(xr[1]));
                }
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++)
            acc[r] = fma ? _mm512_add_ps(_mm512_add_ps(acc[r], acc2[r]), _mm512_add_ps(acc3[r], acc4[r]))
                         : _mm512_add_ps(acc[r], acc2[r]);
        const __m512 dg = widen_bf16(_mm256_loadu_si256((const __m256i*)(d + g * TILE)));
        const __m512 zg = z ? widen_bf16(_mm256_loadu_si256((const __m256i*)(z + g * TILE))) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 s = _mm512_set1_ps(sx[(size_t)r * groups + g]);
            out[r] = _mm512_fmadd_ps(dg, biased ? _mm512_fnmadd_ps(offset, s, acc[r]) : acc[r], out[r]);
            if (z) out[r] = _mm512_fmadd_ps(zg, s, out[r]);
        }
    }
    const __mmask16 mask = tail(cols);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
        _mm256_mask_storeu_epi16(y + (size_t)r * N, mask, (__m256i)_mm512_cvtneps_pbh(out[r]));
}

#define ROW_BLOCKS(BITS, FMA)                                                                         \
    switch (M - r0 < ROWS ? M - r0 : ROWS) {                                                          \
        case 1: tile(xr, xfr, sr, wt, dt, zt, yr, 1, BITS, FMA, K, N, group, cols); break;            \
        case 2: tile(xr, xfr, sr, wt, dt, zt, yr, 2, BITS, FMA, K, N, group, cols); break;            \
        case 3: tile(xr, xfr, sr, wt, dt, zt, yr, 3, BITS, FMA, K, N, group, cols); break;            \
        case 4: tile(xr, xfr, sr, wt, dt, zt, yr, 4, BITS, FMA, K, N, group, cols); break;            \
        case 5: tile(xr, xfr, sr, wt, dt, zt, yr, 5, BITS, FMA, K, N, group, cols); break;            \
        case 6: tile(xr, xfr, sr, wt, dt, zt, yr, 6, BITS, FMA, K, N, group, cols); break;            \
        case 7: tile(xr, xfr, sr, wt, dt, zt, yr, 7, BITS, FMA, K, N, group, cols); break;            \
        default: tile(xr, xfr, sr, wt, dt, zt, yr, 8, BITS, FMA, K, N, group, cols); break;           \
    }

AVX512 void quant_matmul(const uint16_t* x, const uint8_t* w, const uint16_t* d, const uint16_t* z, uint16_t* y,
                         int M, int N, int K, int group, int bits, int fma, int threads, float* scratch) {
    const int groups = K / group, tiles = (N + TILE - 1) / TILE;
    float *sx = scratch, *xf = scratch + (size_t)M * groups; /* the groups' sums of x; x as float32 (fma) */
    for (int r = 0; r < M; r++)
        for (int g = 0; g < groups; g++) {
            float s = 0;
            for (int k = g * group; k < (g + 1) * group; k++) {
                uint32_t b = (uint32_t)x[(size_t)r * K + k] << 16;
                float f;
                __builtin_memcpy(&f, &b, 4);
                s += f;
                if (fma) xf[(size_t)r * K + k] = f;
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
            const float *xfr = xf + (size_t)r0 * K, *sr = sx + (size_t)r0 * groups;
            uint16_t* yr = y + (size_t)r0 * N + (size_t)t * TILE;
            const int cols = N - t * TILE;
            if (bits == 4 && fma) {
                ROW_BLOCKS(4, 1)
            } else if (bits == 4) {
                ROW_BLOCKS(4, 0)
            } else if (fma) {
                ROW_BLOCKS(8, 1)
            } else {
                ROW_BLOCKS(8, 0)
            }
        }
    }
}
#endif
