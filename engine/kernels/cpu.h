/* What our CPU kernels share: they are built for x86-64 with GCC or Clang (elsewhere cpu_module.c reports them
 * unsupported), each function compiled for AVX-512 with BF16 and run only where the CPU has it. */
#pragma once
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_KERNELS 1
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* 16 bf16 numbers as float32: the bits shifted into the high half. */
static inline AVX512 __m512 widen_bf16(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* The first `left` of 16 lanes (all for 16 or more, none for 0 or fewer). */
static inline AVX512 __mmask16 tail(int left) {
    return left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* 16 numbers from element i of a bf16 or float32 array, as float32 (masked lanes read as 0, and not at all). */
static inline AVX512 __m512 load(const void* p, size_t i, int bf16, __mmask16 m) {
    return bf16 ? widen_bf16(_mm256_maskz_loadu_epi16(m, (const uint16_t*)p + i))
                : _mm512_maskz_loadu_ps(m, (const float*)p + i);
}

/* 16 float32 numbers to element i of a bf16 (rounded to nearest even) or float32 array. */
static inline AVX512 void store(void* p, size_t i, __m512 v, int bf16, __mmask16 m) {
    if (bf16)
        _mm256_mask_storeu_epi16((uint16_t*)p + i, m, (__m256i)_mm512_cvtneps_pbh(v));
    else
        _mm512_mask_storeu_ps((float*)p + i, m, v);
}

/* y [M, N] bf16 = x [M, K] bf16 @ w.T for packed 4- or 8-bit w (cpu_quant_matmul.c); z NULL: no zeros (8 bits);
 * fma: float32 products, else bf16 pairs'; scratch: M * (K / group + K) floats. */
void quant_matmul(const uint16_t* x, const uint8_t* w, const uint16_t* d, const uint16_t* z, uint16_t* y, int M, int N,
                  int K, int group, int bits, int fma, int threads, float* scratch);

/* y [M, N] bf16 = RMSNorm of x [M, N] bf16 with weight w [N] bf16, torch's bits (cpu_norm.c); N a multiple of 32. */
void rms_norm(const uint16_t* x, const uint16_t* w, uint16_t* y, int M, int N, float eps);

/* y [T, heads, dim] bf16 = rotary embedding of x's rows (row_stride elements apart) by cos and sin [T, dim]
 * (cpu_rope.c); dim a multiple of 32. */
void rope(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y, int T, int heads, int dim,
          int64_t row_stride);

/* y[rows] += each slot's LoRA delta, in place (cpu_lora.c); a_lanes, b_lanes: one slot's A and B in 32-bit lanes. */
void lora_add(const void* x, void* y, int bf16, const void* a, const void* b, size_t a_lanes, size_t b_lanes,
              int wbf16, const float* scale, const int32_t* parts, int num_parts, int in, int out, const int32_t* rows,
              const int32_t* groups, int num_groups, int threads);
/* out [T, heads, dim] = each sequence's rows attending over its paged keys and values (cpu_attention.c); seqs: per
 * sequence (first row, rows, context length); strides: the caches' block, position and head strides in elements;
 * scratch: threads * max_ctx floats. */
void paged_attention(const void* q, const void* k, const void* v, void* out, const int32_t* seqs,
                     const int32_t* tables, int num_seqs, int width, int heads, int kv_heads, int dim, int block_size,
                     const int64_t* strides, float scale, int bf16, int threads, float* scratch, int max_ctx);
/* The step's new keys and values [num_new, kv_heads, dim] (new_strides: k's row and head strides, then v's, in
 * elements; dim contiguous) into the caches at their flat slots (block * block_size + offset), by the caches' strides
 * (cpu_attention.c); esize: bytes an element. */
void kv_write(const void* new_k, const void* new_v, void* k, void* v, const int64_t* slots, int num_new,
              const int64_t* new_strides, int kv_heads, int dim, int block_size, const int64_t* strides, int esize);
#else
#define HAVE_KERNELS 0
#endif
