/* Rotary position embedding of bf16 rows in one call: y = bf16(bf16(x * cos) + rotate_half(x) * sin), rotate_half's
 * sign folded into sin (llama.py's tables), as torch's three ops compute it: each product of two bf16 numbers is
 * exact in float32, so the one rounding of the sum and the two to bf16 are torch's, bit for bit. */
#include "cpu.h"

#if HAVE_KERNELS
AVX512 void rope(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y, int T, int heads, int dim,
                 int64_t row_stride) {
    const int half = dim / 2;
    for (int t = 0; t < T; t++) {
        const uint16_t *c = cos + (size_t)t * dim, *s = sin + (size_t)t * dim;
        for (int h = 0; h < heads; h++) {
            const uint16_t* xh = x + t * row_stride + (size_t)h * dim;
            uint16_t* yh = y + ((size_t)t * heads + h) * dim;
            for (int i = 0; i < dim; i += 16) {
                const __m512 v = widen_bf16(_mm256_loadu_si256((const __m256i*)(xh + i)));
                const __m512 other = widen_bf16(_mm256_loadu_si256((const __m256i*)(xh + (i + half) % dim)));
                const __m256i a = (__m256i)_mm512_cvtneps_pbh(
                    _mm512_mul_ps(v, widen_bf16(_mm256_loadu_si256((const __m256i*)(c + i)))));
                const __m512 r = _mm512_fmadd_ps(other, widen_bf16(_mm256_loadu_si256((const __m256i*)(s + i))),
                                                 widen_bf16(a));
                _mm256_storeu_si256((__m256i*)(yh + i), (__m256i)_mm512_cvtneps_pbh(r));
            }
        }
    }
}
#endif
