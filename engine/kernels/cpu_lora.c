/* The CPU LoRA delta of one wrapped linear for a whole step, in one call: for the rows of each adapter slot s,
 * y[rows] += scale[s] * (x[rows] @ A[s]) @ B[s], in float32 whatever the dtypes (x and y bf16 or float32, A [S, in, W]
 * and B [S, W, out] bf16 or float32, W = parts x rank). `rows` lists the rows slot by slot; groups[i] is
 * (slot, first, end) into it.
 *
 * B of a fused linear (q/k/v, gate/up) is block-diagonal: part p's rows [r0, r1) under its columns [c0, c1), zeros
 * elsewhere. Only the parts' blocks are read: a third of q/k/v's B, half of gate/up's. A slot's rows go in blocks of
 * 4, so its weights are read once per 4 of its rows, row after row of each matrix (the order the prefetcher follows):
 * a step costs about the bytes of the adapters it uses (decodes spread over many adapters are bound by memory). */
#include <stdlib.h>

#include "cpu.h"

#if HAVE_KERNELS
#define ROWS 4    /* rows of one slot a block: its weights are read once per block */
#define CHUNKS 4  /* 16-column chunks of A or B a pass: ROWS x CHUNKS accumulators in registers */
#define AHEAD 4   /* rows of A or B prefetched ahead of a pass */

/* acc[r][q] += lhs[r * ld + j] * rhs[j * stride + c + 16 q] for j in [j0, j1): a pass over 64 columns of the right
 * matrix (bf16 or float32), row after row of it, for nr <= ROWS left rows. */
static inline AVX512 __attribute__((always_inline)) void pass(__m512 acc[ROWS][CHUNKS], const float* lhs, size_t ld,
                                                              const void* rhs, int rbf16, size_t stride, int c,
                                                              int cols, int j0, int j1, int nr) {
    const size_t size = rbf16 ? 2 : 4;
    __mmask16 m[CHUNKS];
#pragma GCC unroll 4
    for (int q = 0; q < CHUNKS; q++) m[q] = tail(cols - c - 16 * q);
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 4
        for (int q = 0; q < CHUNKS; q++) acc[r][q] = _mm512_setzero_ps();
    for (int j = j0; j < j1; j++) {
        __m512 v[CHUNKS];
        /* The matrix's rows 4 ahead: a pass reads 16 rows of B a few lines each, which the hardware prefetcher does
         * not follow (without this the kernel measured slower than torch's calls on adapters read from memory). */
#pragma GCC unroll 4
        for (int q = 0; q < CHUNKS; q++)
            _mm_prefetch((const char*)rhs + ((size_t)(j + AHEAD) * stride + c + 16 * q) * size, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int q = 0; q < CHUNKS; q++) v[q] = load(rhs, (size_t)j * stride + c + 16 * q, rbf16, m[q]);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            if (r < nr) {
                const __m512 u = _mm512_set1_ps(lhs[(size_t)r * ld + j]);
#pragma GCC unroll 4
                for (int q = 0; q < CHUNKS; q++) acc[r][q] = _mm512_fmadd_ps(u, v[q], acc[r][q]);
            }
    }
}

/* Rows rows[0..nr) of slot s: t = x @ A, then y += scale * t @ B part by part. xf: ROWS * in floats of scratch, t:
 * ROWS * width. */
static AVX512 void block(const void* x, void* y, const void* a, const void* b, int wbf16, float scale,
                         const int32_t* parts, int num_parts, const int32_t* rows, int nr, int in, int width, int out,
                         int bf16, float* xf, float* t) {
    __m512 acc[ROWS][CHUNKS];
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < in; k += 16)
            _mm512_mask_storeu_ps(xf + (size_t)r * in + k, tail(in - k),
                                  load(x, (size_t)rows[r] * in + k, bf16, tail(in - k)));
    for (int c = 0; c < width; c += 16 * CHUNKS) {
        pass(acc, xf, in, a, wbf16, width, c, width, 0, in, nr);
        for (int r = 0; r < nr; r++)
            for (int q = 0; q < CHUNKS; q++)
                _mm512_mask_storeu_ps(t + (size_t)r * width + c + 16 * q, tail(width - c - 16 * q), acc[r][q]);
    }
    const __m512 sv = _mm512_set1_ps(scale);
    for (int p = 0; p < num_parts; p++) {  /* B's block of part p: its rows [r0, r1) under its columns [c0, c1) */
        const int r0 = parts[4 * p], r1 = parts[4 * p + 1], c0 = parts[4 * p + 2], c1 = parts[4 * p + 3];
        for (int c = c0; c < c1; c += 16 * CHUNKS) {
            pass(acc, t, width, b, wbf16, out, c, c1, r0, r1, nr);
            for (int r = 0; r < nr; r++)
                for (int q = 0; q < CHUNKS; q++) {
                    const __mmask16 m = tail(c1 - c - 16 * q);
                    const size_t i = (size_t)rows[r] * out + c + 16 * q;
                    store(y, i, _mm512_fmadd_ps(sv, acc[r][q], load(y, i, bf16, m)), bf16, m);
                }
        }
    }
}

AVX512 void lora_add(const void* x, void* y, const void* a, const void* b, int wbf16, const float* scale,
                     const int32_t* rows, const int32_t* groups, int num_groups, const int32_t* parts, int num_parts,
                     int in, int width, int out, int bf16, int threads) {
    const size_t size = wbf16 ? 2 : 4;
    int num_blocks = 0;  /* each slot's rows cut into blocks of up to ROWS: the unit of work */
    for (int i = 0; i < num_groups; i++) num_blocks += (groups[3 * i + 2] - groups[3 * i + 1] + ROWS - 1) / ROWS;
    int32_t* work = malloc(sizeof(int32_t) * 3 * (size_t)(num_blocks + 1));
    num_blocks = 0;
    for (int i = 0; i < num_groups; i++)
        for (int at = groups[3 * i + 1]; at < groups[3 * i + 2]; at += ROWS) {
            work[3 * num_blocks] = groups[3 * i];
            work[3 * num_blocks + 1] = at;
            work[3 * num_blocks + 2] = groups[3 * i + 2] - at < ROWS ? groups[3 * i + 2] - at : ROWS;
            num_blocks++;
        }
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float* scratch = malloc(sizeof(float) * ROWS * ((size_t)in + width));
#pragma omp for schedule(dynamic)
        for (int i = 0; i < num_blocks; i++) {
            const int s = work[3 * i];
            block(x, y, (const char*)a + (size_t)s * in * width * size, (const char*)b + (size_t)s * width * out * size,
                  wbf16, scale[s], parts, num_parts, rows + work[3 * i + 1], work[3 * i + 2], in, width, out, bf16,
                  scratch, scratch + (size_t)ROWS * in);
        }
        free(scratch);
    }
    free(work);
}
#endif
