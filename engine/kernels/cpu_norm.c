/* RMSNorm of bf16 rows in one call, y = bf16(x * (1 / sqrt(mean(x^2) + eps)) * w), each product rounded to float32
 * and the result rounded once, as torch's CPU rms_norm computes it; and its sum of squares in torch's order
 * (sum_of_squares), so that the bits are torch's: another order moves some outputs by one bf16 rounding, which flips
 * near ties (the README's demo answer was one: docs/benchmarks/2026-12-07-cpu-kernels.md). cpu_norm.py uses it only
 * for widths where it checked the bits equal. torch's call is several kernels, about 10 us a decode row; this 1.4. */
#include "cpu.h"

#if HAVE_KERNELS
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off") /* x*x then +: two roundings, as torch's pow then sum */

#define LANES 8 /* torch's float vectors here (its AVX2 kernels) */
#define ILP 4     /* vectors summed side by side */
#define LEVELS 4  /* torch's cascade: partial sums moved up a level every 2^power steps, added at the end */

static inline AVX512 __m256 squares(const uint16_t* p) {
    const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)),
                                                           16));
    return _mm256_mul_ps(v, v);
}

/* The sum of squares of a row of N (a multiple of 32) bf16 numbers, in torch's order (its cascade_sum over the row
 * as N / 8 vectors: ILP interleaved rows of them, each a cascade of LEVELS partial sums). */
static inline AVX512 float sum_of_squares(const uint16_t* x, int N) {
    const int steps = N / LANES / ILP;
    int log2 = 0;
    while ((1 << log2) < steps) log2++;
    const int power = log2 / LEVELS > 4 ? log2 / LEVELS : 4, step = 1 << power, mask = step - 1;
    __m256 acc[LEVELS][ILP];
    for (int l = 0; l < LEVELS; l++)
        for (int k = 0; k < ILP; k++) acc[l][k] = _mm256_setzero_ps();
    int i = 0;
    while (i + step <= steps) {
        for (int j = 0; j < step; j++, i++)
            for (int k = 0; k < ILP; k++) acc[0][k] = _mm256_add_ps(acc[0][k], squares(x + (i * ILP + k) * LANES));
        for (int l = 1; l < LEVELS; l++) {
            for (int k = 0; k < ILP; k++) {
                acc[l][k] = _mm256_add_ps(acc[l][k], acc[l - 1][k]);
                acc[l - 1][k] = _mm256_setzero_ps();
            }
            if (i & (mask << (l * power))) break;
        }
    }
    for (; i < steps; i++)
        for (int k = 0; k < ILP; k++) acc[0][k] = _mm256_add_ps(acc[0][k], squares(x + (i * ILP + k) * LANES));
    for (int l = 1; l < LEVELS; l++)
        for (int k = 0; k < ILP; k++) acc[0][k] = _mm256_add_ps(acc[0][k], acc[l][k]);
    __m256 s = acc[0][0];
    for (int k = 1; k < ILP; k++) s = _mm256_add_ps(s, acc[0][k]);
    float lanes[LANES], sum = 0;
    _mm256_storeu_ps(lanes, s);
    for (int l = 0; l < LANES; l++) sum += lanes[l];
    return sum;
}

AVX512 void rms_norm(const uint16_t* x, const uint16_t* w, uint16_t* y, int M, int N, float eps) {
    for (int r = 0; r < M; r++) {
        const uint16_t* xr = x + (size_t)r * N;
        const float sum = sum_of_squares(xr, N);
        const float mean = sum / (float)N;
        const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(mean + eps));
        for (int i = 0; i < N; i += 16) {
            const __m512 v = widen_bf16(_mm256_loadu_si256((const __m256i*)(xr + i)));
            const __m512 g = widen_bf16(_mm256_loadu_si256((const __m256i*)(w + i)));
            _mm256_storeu_si256((__m256i*)(y + (size_t)r * N + i),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_mul_ps(v, scale), g)));
        }
    }
}

#pragma GCC pop_options
#endif
