/* The CPU int4 matmul: y [M, N] bf16 = x [M, K] bf16 @ w.T, w[n, k] = (q - 8) * d + z per group of `group` input
 * columns (q in 0..15; d, z bf16: torch's int4 form, whose zero z at the codes' middle is small where the weights
 * are centred, so that its bf16 rounding costs little), on AVX-512 BF16 (vdpbf16ps: bf16 pairs multiplied exactly,
 * summed in float32).
 *
 * Layout (cpu_int4.py packs it): columns in tiles of 16; a tile's codes are K/4 blocks of 32 bytes, byte 2i+e of
 * block b holding q(4b+e, i) in its low nibble and q(4b+2+e, i) in its high one, so one zero-extension to 16-bit
 * lanes and a mask or a shift give the bf16 pairs (k, k+1) and (k+2, k+3) of the 16 columns. A code becomes a bf16
 * number by or-ing in 0x4300: the bits of 128 + q, exact. The sum over a group is then S = sum x (128 + q), and
 * y += d (S - 136 sum x) + z sum x, with the groups' sums of x taken once per call.
 * Rows go in blocks of 8 (16 accumulators in registers), each block over a tile's codes while they sit in L1. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_KERNEL 1
#define TILE 16
#define ROWS 8
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

static inline AVX512 __m512 widen_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

/* One tile of 16 columns for `nr` (<= ROWS) rows; inlined for each constant nr so the loops over rows unroll. */
static inline AVX512 __attribute__((always_inline)) void tile(const uint16_t* x, const float* sx, const uint8_t* w,
                                                              const uint16_t* d, const uint16_t* z, uint16_t* y,
                                                              int nr, int K, int N, int group, int cols) {
    const int groups = K / group;
    const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
    const __m512 offset = _mm512_set1_ps(136.0f);
    __m512 out[ROWS], acc[ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) out[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) acc[r] = _mm512_setzero_ps();
        for (int k = g * group; k < (g + 1) * group; k += 4) {
            __m512i z = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(w + (size_t)k * 8)));
            __m512bh lo = (__m512bh)_mm512_ternarylogic_epi32(z, low, bias, 0xEA); /* (z & low) | bias */
            __m512bh hi = (__m512bh)_mm512_or_si512(_mm512_srli_epi16(z, 4), bias);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const int32_t* xr = (const int32_t*)(x + (size_t)r * K + k);
                acc[r] = _mm512_dpbf16_ps(acc[r], lo, (__m512bh)_mm512_set1_epi32(xr[0]));
                acc[r] = _mm512_dpbf16_ps(acc[r], hi, (__m512bh)_mm512_set1_epi32(xr[1]));
            }
        }
        const __m512 dg = widen_bf16(d + g * TILE), zg = widen_bf16(z + g * TILE);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 s = _mm512_set1_ps(sx[(size_t)r * groups + g]);
            out[r] = _mm512_fmadd_ps(dg, _mm512_fnmadd_ps(offset, s, acc[r]), out[r]);
            out[r] = _mm512_fmadd_ps(zg, s, out[r]);
        }
    }
    const __mmask16 mask = cols >= TILE ? 0xFFFF : (__mmask16)((1u << cols) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
        _mm256_mask_storeu_epi16(y + (size_t)r * N, mask, (__m256i)_mm512_cvtneps_pbh(out[r]));
}

static AVX512 void matmul(const uint16_t* x, const uint8_t* w, const uint16_t* d, const uint16_t* z, uint16_t* y,
                          int M, int N, int K, int group, int threads, float* sx) {
    const int groups = K / group, tiles = (N + TILE - 1) / TILE;
    for (int r = 0; r < M; r++)
        for (int g = 0; g < groups; g++) {
            float s = 0;
            for (int k = g * group; k < (g + 1) * group; k++) {
                uint32_t bits = (uint32_t)x[(size_t)r * K + k] << 16;
                float f;
                __builtin_memcpy(&f, &bits, 4);
                s += f;
            }
            sx[(size_t)r * groups + g] = s;
        }
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int t = 0; t < tiles; t++) {
        const uint8_t* wt = w + (size_t)t * K * 8;
        const uint16_t *dt = d + (size_t)t * groups * TILE, *zt = z + (size_t)t * groups * TILE;
        for (int r0 = 0; r0 < M; r0 += ROWS) {
            const uint16_t* xr = x + (size_t)r0 * K;
            const float* sr = sx + (size_t)r0 * groups;
            uint16_t* yr = y + (size_t)r0 * N + (size_t)t * TILE;
            const int cols = N - t * TILE;
            switch (M - r0 < ROWS ? M - r0 : ROWS) {
                case 1: tile(xr, sr, wt, dt, zt, yr, 1, K, N, group, cols); break;
                case 2: tile(xr, sr, wt, dt, zt, yr, 2, K, N, group, cols); break;
                case 3: tile(xr, sr, wt, dt, zt, yr, 3, K, N, group, cols); break;
                case 4: tile(xr, sr, wt, dt, zt, yr, 4, K, N, group, cols); break;
                case 5: tile(xr, sr, wt, dt, zt, yr, 5, K, N, group, cols); break;
                case 6: tile(xr, sr, wt, dt, zt, yr, 6, K, N, group, cols); break;
                case 7: tile(xr, sr, wt, dt, zt, yr, 7, K, N, group, cols); break;
                default: tile(xr, sr, wt, dt, zt, yr, 8, K, N, group, cols); break;
            }
        }
    }
}
#else
#define HAVE_KERNEL 0
#endif

/* supported() -> bool: the kernel is built and this CPU has the instructions it uses. */
static PyObject* supported(PyObject* self, PyObject* args) {
#if HAVE_KERNEL
    __builtin_cpu_init();
    return PyBool_FromLong(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16"));
#else
    Py_RETURN_FALSE;
#endif
}

/* matmul(x, w, d, z, y, M, N, K, group, threads): addresses of contiguous buffers in the layout above. The caller
 * (cpu_int4.py) checks shapes and dtypes; the GIL is released while it runs. */
static PyObject* py_matmul(PyObject* self, PyObject* args) {
    unsigned long long x, w, d, z, y;
    int M, N, K, group, threads;
    if (!PyArg_ParseTuple(args, "KKKKKiiiii", &x, &w, &d, &z, &y, &M, &N, &K, &group, &threads)) return NULL;
#if HAVE_KERNEL
    float* sx = malloc(sizeof(float) * ((size_t)M * (K / group) + 1));
    if (!sx) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    matmul((const uint16_t*)x, (const uint8_t*)w, (const uint16_t*)d, (const uint16_t*)z, (uint16_t*)y, M, N, K, group,
           threads, sx);
    Py_END_ALLOW_THREADS
    free(sx);
    Py_RETURN_NONE;
#else
    PyErr_SetString(PyExc_RuntimeError, "the CPU int4 kernel is not built for this machine");
    return NULL;
#endif
}

static PyMethodDef methods[] = {
    {"supported", supported, METH_NOARGS, "whether this CPU runs the kernel"},
    {"matmul", py_matmul, METH_VARARGS, "y = x @ w.T for packed int4 w"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_int4", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu_int4(void) { return PyModule_Create(&module); }
