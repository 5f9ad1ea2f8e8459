/* The CPU LoRA delta of one wrapped linear for a whole step, in one call: for the rows of each adapter slot s,
 * y[rows] += scale[s] * (x[rows] @ A[s]) @ B[s] (x and y bf16 or float32, the adapters bf16 or float32). `rows` lists
 * the rows slot by slot; groups[i] is (slot, first, end) into it.
 *
 * The weights are stored as cpu_lora.pack lays them out, in 32-bit lanes: a float32 number, or a pair of bf16
 * numbers of two consecutive rows, which vdpbf16ps multiplies by a pair of the left side's numbers and adds to a
 * float32 lane (no conversion: bf16 adapters are read and multiplied at 32 numbers an instruction). A [in, W]
 * (W = parts x rank) is rows of W lanes. B of a fused linear (q/k/v, gate/up) is block-diagonal, part p's rows
 * [r0, r1) under its columns [c0, c1); only the parts' blocks are stored, part after part, each in panels of PANEL
 * columns (the last zero-padded), a panel its rows of PANEL lanes one after the other. So every matrix is read as one
 * stream (B read in 16-row pieces of its full rows ran at a third of the speed), and a slot's rows go in blocks of 4,
 * so its weights are read once per 4 of its rows: decodes spread over many adapters are bound by memory. The bf16
 * path rounds x @ A to bf16 before B, as a bf16 matmul in torch (and peft) does. */
#include <stdlib.h>

#include "cpu.h"

#if HAVE_KERNELS
#define ROWS 4    /* rows of one slot a block: its weights are read once per block */
#define CHUNKS 4  /* 16-lane chunks a pass: ROWS x CHUNKS accumulators in registers */
#define PANEL (16 * CHUNKS)
#define AHEAD 1024 /* lanes prefetched ahead in a contiguous stream (4 KB, best measured of 256 B to 8 KB) */

/* out[r * ldo + c] = sum over j < n of lhs[r * ld + j] . rhs[j * stride + c], for c < cols <= PANEL lanes of the
 * right matrix and r < nr <= ROWS: a float32 product, or (pairs) vdpbf16ps; `ahead`: lanes prefetched ahead. Each
 * step reads `split` rows of `per` 16-lane chunks (where cols fit in 16 or 32 lanes, 4 or 2 rows into separate
 * accumulators, summed at the end: one chain a row would wait on the multiply's latency). lhs is zero up to a
 * multiple of 4 past n. The accumulators stay in registers (passed in from the caller, they went to the stack). */
static inline AVX512 __attribute__((always_inline)) void pass_split(float* out, size_t ldo, const uint32_t* lhs,
                                                                    size_t ld, const uint32_t* rhs, size_t stride,
                                                                    int cols, int n, size_t ahead, int nr, int pairs,
                                                                    const int split, const int per) {
    __m512 acc[ROWS][CHUNKS];
    __mmask16 m[CHUNKS];
#pragma GCC unroll 4
    for (int q = 0; q < per; q++) m[q] = tail(cols - 16 * q);
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 4
        for (int k = 0; k < split * per; k++) acc[r][k] = _mm512_setzero_ps();
    for (int j = 0; j < n; j += split) {
        __m512i v[CHUNKS];
#pragma GCC unroll 4
        for (int k = 0; k < split * per; k++)
            _mm_prefetch((const char*)(rhs + (j + k / per) * stride + ahead + 16 * (k % per)), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int k = 0; k < split * per; k++)
            v[k] = _mm512_maskz_loadu_epi32(j + k / per < n ? m[k % per] : 0,
                                            rhs + (j + k / per) * stride + 16 * (k % per));
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            if (r < nr) {
#pragma GCC unroll 4
                for (int k = 0; k < split * per; k++) {
                    const __m512i u = _mm512_set1_epi32((int)lhs[r * ld + j + k / per]);
                    acc[r][k] = pairs ? _mm512_dpbf16_ps(acc[r][k], (__m512bh)u, (__m512bh)v[k])
                                      : _mm512_fmadd_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(v[k]), acc[r][k]);
                }
            }
    }
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
        if (r < nr) {
#pragma GCC unroll 4
            for (int q = 0; q < per; q++) {
                __m512 sum = acc[r][q];
#pragma GCC unroll 4
                for (int k = q + per; k < split * per; k += per) sum = _mm512_add_ps(sum, acc[r][k]);
                _mm512_mask_storeu_ps(out + r * ldo + 16 * q, m[q], sum);
            }
        }
}

static inline AVX512 __attribute__((always_inline)) void pass(float* out, size_t ldo, const uint32_t* lhs, size_t ld,
                                                              const uint32_t* rhs, size_t stride, int cols, int n,
                                                              size_t ahead, int nr, int pairs) {
    if (cols <= 16)
        pass_split(out, ldo, lhs, ld, rhs, stride, cols, n, ahead, nr, pairs, 4, 1);
    else if (cols <= 32)
        pass_split(out, ldo, lhs, ld, rhs, stride, cols, n, ahead, nr, pairs, 2, 2);
    else if (cols <= 48)
        pass_split(out, ldo, lhs, ld, rhs, stride, cols, n, ahead, nr, pairs, 1, 3);
    else
        pass_split(out, ldo, lhs, ld, rhs, stride, cols, n, ahead, nr, pairs, 1, 4);
}

/* n numbers of src (bf16 or float32) as lanes of dst: float32, or bf16 pairs (an odd n padded with a zero), then
 * zero lanes up to a multiple of 4 (what pass reads past n). */
static AVX512 void lanes(uint32_t* dst, const void* src, size_t at, int n, int sbf16, int pairs) {
    for (int k = 0; k < n; k += 16) store(dst, k, load(src, at + k, sbf16, tail(n - k)), pairs, tail(n - k));
    if (pairs && n % 2) ((uint16_t*)dst)[n] = 0;
    for (int k = pairs ? (n + 1) / 2 : n; k % 4; k++) dst[k] = 0;
}

/* Rows rows[0..nr) of slot s: t = x @ A, then y += scale * t @ B panel by panel. Scratch: xs ROWS * (in + 4) lanes,
 * t ROWS * width floats, ts ROWS * (width + 4) lanes, yacc ROWS * PANEL floats. */
static AVX512 void block(const void* x, void* y, const uint32_t* a, const uint32_t* b, int pairs, float scale,
                         const int32_t* parts, int num_parts, const int32_t* rows, int nr, int in, int width, int out,
                         int bf16, uint32_t* xs, float* t, uint32_t* ts, float* yacc) {
    const int ain = pairs ? (in + 1) / 2 : in;  /* A's rows of lanes */
    for (int r = 0; r < nr; r++) lanes(xs + (size_t)r * (in + 4), x, (size_t)rows[r] * in, in, bf16, pairs);
    for (int c = 0; c < width; c += PANEL)  /* a contiguous stream where width <= PANEL, rows in strides past it */
        pass(t + c, width, xs, in + 4, a + c, width, width - c, ain, width <= PANEL ? AHEAD : 4 * (size_t)width, nr,
             pairs);
    const __m512 sv = _mm512_set1_ps(scale);
    const uint32_t* panel = b;
    for (int p = 0; p < num_parts; p++) {
        const int r0 = parts[4 * p], r1 = parts[4 * p + 1], c0 = parts[4 * p + 2], c1 = parts[4 * p + 3];
        const int brows = pairs ? (r1 - r0 + 1) / 2 : r1 - r0;  /* the part's rows of lanes */
        for (int r = 0; r < nr; r++) lanes(ts + (size_t)r * (width + 4), t, (size_t)r * width + r0, r1 - r0, 0, pairs);
        for (int c = c0; c < c1; c += PANEL, panel += (size_t)brows * PANEL) {
            pass(yacc, PANEL, ts, width + 4, panel, PANEL, c1 - c, brows, AHEAD, nr, pairs);
            for (int r = 0; r < nr; r++)
                for (int q = 0; q < CHUNKS; q++) {
                    const __mmask16 m = tail(c1 - c - 16 * q);
                    const size_t i = (size_t)rows[r] * out + c + 16 * q;
                    store(y, i, _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, yacc + r * PANEL + 16 * q),
                                                load(y, i, bf16, m)), bf16, m);
                }
        }
    }
}

AVX512 void lora_add(const void* x, void* y, int bf16, const void* a, const void* b, size_t a_lanes, size_t b_lanes,
                     int wbf16, const float* scale, const int32_t* parts, int num_parts, int in, int out,
                     const int32_t* rows, const int32_t* groups, int num_groups, int threads) {
    const int width = parts[4 * num_parts - 3];  /* the last part's end row */
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
        const size_t xs = ROWS * ((size_t)in + 4), t = ROWS * (size_t)width, ts = ROWS * ((size_t)width + 4);
        uint32_t* scratch = malloc(sizeof(uint32_t) * (xs + t + ts + ROWS * PANEL));
#pragma omp for schedule(dynamic)
        for (int i = 0; i < num_blocks; i++) {
            const int s = work[3 * i];
            block(x, y, (const uint32_t*)a + s * a_lanes, (const uint32_t*)b + s * b_lanes, wbf16, scale[s], parts,
                  num_parts, rows + work[3 * i + 1], work[3 * i + 2], in, width, out, bf16, scratch,
                  (float*)scratch + xs, scratch + xs + t, (float*)scratch + xs + t + ts);
        }
        free(scratch);
    }
    free(work);
}
#endif
