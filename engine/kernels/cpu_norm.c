/* RMSNorm in one pass per row, as F.rms_norm computes it: the mean of squares in float32, then x * (1 / sqrt(mean +
 * eps)) * w in float32, rounded once to the row's dtype (bf16 or float32). torch's CPU op is several kernels and
 * dtype conversions a call, most of a batch-1 norm's time on rows this short. */
#include <math.h>

#include "cpu.h"

#if HAVE_KERNELS
AVX512 void rms_norm(const void* x, const void* w, void* y, int T, int D, float eps, int bf16, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && T > 1)
    for (int t = 0; t < T; t++) {
        __m512 sum = _mm512_setzero_ps();
        for (int k = 0; k < D; k += 16) {
            const __m512 v = load(x, (size_t)t * D + k, bf16, tail(D - k));
            sum = _mm512_fmadd_ps(v, v, sum);
        }
        const __m512 r = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(sum) / (float)D + eps));
        for (int k = 0; k < D; k += 16) {
            const __mmask16 m = tail(D - k);
            const __m512 v = load(x, (size_t)t * D + k, bf16, m);
            store(y, (size_t)t * D + k, _mm512_mul_ps(_mm512_mul_ps(v, r), load(w, k, bf16, m)), bf16, m);
        }
    }
}
#endif
