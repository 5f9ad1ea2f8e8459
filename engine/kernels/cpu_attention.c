/* Paged attention on CPU for few query rows a sequence (decodes, a speculative verify's drafts): each query row
 * attends over its sequence's keys read in place by block table, no gathered copy; float32 math, q, the caches and
 * the output in the model's dtype (bf16 or float32).
 *
 * The caches are [num_blocks, block_size, kv_heads, head_dim] by their strides (kv_cache.allocate's are head-major, so
 * that one head's positions in a block are one contiguous matrix), head_dim contiguous. A sequence's rows are its last
 * `len` tokens of `ctx`; row i sees the first ctx - len + i + 1 positions (causal). Per query row and head: the scores
 * into scratch, then their exponentials from the largest (one pass: exp2 of a polynomial), then the weighted values.
 * The (sequence, head) pairs are spread over the threads. */
#include "cpu.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if HAVE_KERNELS
/* 2^t for t <= 0 (scores minus their maximum, in log2 units), 16 at a time: 2^round(t) by scalef times 2^f,
 * f in [-0.5, 0.5], by its Taylor polynomial to degree 6 (relative error under 2e-7, below float32's rounding of
 * the sums it enters). Very negative t underflow to 0, as exp does. */
static inline AVX512 __m512 exp2_neg(__m512 t) {
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.5403530e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, _mm512_max_ps(n, _mm512_set1_ps(-150.0f)));
}

/* One query row q [dim] over positions 0..n-1 of a head's keys and values; out [dim]; s: n floats of scratch. Inlined
 * for constant dtypes and head sizes, so that the loops over a row's 16-wide chunks unroll. */
static inline AVX512 __attribute__((always_inline)) void row(const void* q, const void* k, const void* v, void* out,
                                                             const int32_t* table, int n, int dim, int block_size,
                                                             const int64_t* strides, size_t head, float scale,
                                                             int bf16, float* s) {
    const int chunks = (dim + 15) / 16;
    __m512 qv[16], o[16]; /* head_dim up to 256 */
    __mmask16 m[16];
    for (int c = 0; c < chunks; c++) {
        m[c] = tail(dim - c * 16);
        qv[c] = _mm512_mul_ps(load(q, (size_t)c * 16, bf16, m[c]), _mm512_set1_ps(scale * 1.44269504f)); /* log2 */
        o[c] = _mm512_setzero_ps();
    }
    float top = -INFINITY;
    for (int j = 0, b = 0; j < n; b++) {
        const size_t base = head + table[b] * strides[0];
        for (const int end = j + block_size < n ? j + block_size : n; j < end; j++) {
            const size_t at = base + (size_t)(j - b * block_size) * strides[1];
            __m512 acc = _mm512_mul_ps(qv[0], load(k, at, bf16, m[0]));
            for (int c = 1; c < chunks; c++) acc = _mm512_fmadd_ps(qv[c], load(k, at + c * 16, bf16, m[c]), acc);
            s[j] = _mm512_reduce_add_ps(acc);
            top = s[j] > top ? s[j] : top;
        }
    }
    __m512 sum = _mm512_setzero_ps();
    const __m512 high = _mm512_set1_ps(top);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 mj = tail(n - j);
        const __m512 e = _mm512_maskz_mov_ps(mj, exp2_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(mj, s + j), high)));
        _mm512_mask_storeu_ps(s + j, mj, e);
        sum = _mm512_add_ps(sum, e);
    }
    const __m512 norm = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int j = 0, b = 0; j < n; b++) {
        const size_t base = head + table[b] * strides[0];
        for (const int end = j + block_size < n ? j + block_size : n; j < end; j++) {
            const size_t at = base + (size_t)(j - b * block_size) * strides[1];
            const __m512 p = _mm512_set1_ps(s[j]);
            for (int c = 0; c < chunks; c++) o[c] = _mm512_fmadd_ps(p, load(v, at + c * 16, bf16, m[c]), o[c]);
        }
    }
    for (int c = 0; c < chunks; c++) store(out, (size_t)c * 16, _mm512_mul_ps(o[c], norm), bf16, m[c]);
}

void kv_write(const void* new_k, const void* new_v, void* k, void* v, const int64_t* slots, int num_new,
              const int64_t* new_strides, int kv_heads, int dim, int block_size, const int64_t* strides, int esize) {
    const size_t bytes = (size_t)dim * esize;
    for (int t = 0; t < num_new; t++) {
        const int64_t at = slots[t] / block_size * strides[0] + slots[t] % block_size * strides[1];
        for (int h = 0; h < kv_heads; h++) {
            const size_t to = (size_t)(at + h * strides[2]) * esize;
            __builtin_memcpy((char*)k + to, (const char*)new_k + (t * new_strides[0] + h * new_strides[1]) * esize,
                             bytes);
            __builtin_memcpy((char*)v + to, (const char*)new_v + (t * new_strides[2] + h * new_strides[3]) * esize,
                             bytes);
        }
    }
}

AVX512 void paged_attention(const void* q, const void* k, const void* v, void* out, const int32_t* seqs,
                            const int32_t* tables, int num_seqs, int width, int heads, int kv_heads, int dim,
                            int block_size, const int64_t* strides, float scale, int bf16, int threads,
                            float* scratch, int max_ctx) {
    const int group = heads / kv_heads, esize = bf16 ? 2 : 4;
#pragma omp parallel for num_threads(threads) schedule(dynamic) if (threads > 1)
    for (int task = 0; task < num_seqs * heads; task++) {
        const int seq = task / heads, h = task % heads;
        const int start = seqs[seq * 3], len = seqs[seq * 3 + 1], ctx = seqs[seq * 3 + 2];
        const size_t head = (size_t)(h / group) * strides[2];
#ifdef _OPENMP
        float* s = scratch + (size_t)omp_get_thread_num() * max_ctx;
#else
        float* s = scratch;
#endif
        for (int i = 0; i < len; i++) {
            const size_t at = ((size_t)(start + i) * heads + h) * dim * esize;
            const void* qr = (const char*)q + at;
            const int32_t* table = tables + (size_t)seq * width;
            void* o = (char*)out + at;
            const int n = ctx - len + i + 1;
            if (bf16 && dim == 64) row(qr, k, v, o, table, n, 64, block_size, strides, head, scale, 1, s);
            else if (bf16 && dim == 128) row(qr, k, v, o, table, n, 128, block_size, strides, head, scale, 1, s);
            else if (bf16) row(qr, k, v, o, table, n, dim, block_size, strides, head, scale, 1, s);
            else row(qr, k, v, o, table, n, dim, block_size, strides, head, scale, 0, s);
        }
    }
}
#endif
