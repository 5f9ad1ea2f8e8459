/* floodway.engine.kernels._cpu: our CPU kernels for Python (cpu_quant_matmul.py, cpu_norm.py, cpu_rope.py,
 * cpu_lora.py, cpu_attention.py). Arguments are the addresses of contiguous tensors the callers checked, and sizes;
 * the GIL is released while a kernel runs, except RMSNorm's and RoPE's, which take less time than that would. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "cpu.h"

/* supported() -> bool: the kernels are built and this CPU has the instructions they use. */
static PyObject* supported(PyObject* self, PyObject* args) {
#if HAVE_KERNELS
    __builtin_cpu_init();
    return PyBool_FromLong(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16"));
#else
    Py_RETURN_FALSE;
#endif
}

/* vendor() -> str: the CPU's maker, "intel", "amd" or "" (cpu_quant_matmul.py picks its products by it). */
static PyObject* vendor(PyObject* self, PyObject* args) {
#if HAVE_KERNELS
    __builtin_cpu_init();
    return PyUnicode_FromString(__builtin_cpu_is("intel") ? "intel" : __builtin_cpu_is("amd") ? "amd" : "");
#else
    return PyUnicode_FromString("");
#endif
}

#if HAVE_KERNELS
/* quant_matmul(x, y, M, threads, w, d, z, N, K, group, bits, fma): the call's own arguments, then the weight's
 * (`cpu_quant_matmul.Args`; z 0: no zeros). */
static PyObject* py_quant_matmul(PyObject* self, PyObject* args) {
    unsigned long long x, y, w, d, z;
    int M, threads, N, K, group, bits, fma;
    if (!PyArg_ParseTuple(args, "KKiiKKKiiiip", &x, &y, &M, &threads, &w, &d, &z, &N, &K, &group, &bits, &fma))
        return NULL;
    float* scratch = malloc(sizeof(float) * ((size_t)M * (K / group + (fma ? K : 0)) + 1));
    if (!scratch) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    quant_matmul((const uint16_t*)x, (const uint8_t*)w, (const uint16_t*)d, (const uint16_t*)z, (uint16_t*)y, M, N, K,
                 group, bits, fma, threads, scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    Py_RETURN_NONE;
}

/* rms_norm(x, w, y, M, N, eps) */
static PyObject* py_rms_norm(PyObject* self, PyObject* args) {
    unsigned long long x, w, y;
    int M, N;
    float eps;
    if (!PyArg_ParseTuple(args, "KKKiif", &x, &w, &y, &M, &N, &eps)) return NULL;
    rms_norm((const uint16_t*)x, (const uint16_t*)w, (uint16_t*)y, M, N, eps);
    Py_RETURN_NONE;
}

/* rope(x, cos, sin, y, T, heads, dim, row_stride) */
static PyObject* py_rope(PyObject* self, PyObject* args) {
    unsigned long long x, cos, sin, y;
    int T, heads, dim;
    long long row_stride;
    if (!PyArg_ParseTuple(args, "KKKKiiiL", &x, &cos, &sin, &y, &T, &heads, &dim, &row_stride)) return NULL;
    rope((const uint16_t*)x, (const uint16_t*)cos, (const uint16_t*)sin, (uint16_t*)y, T, heads, dim, row_stride);
    Py_RETURN_NONE;
}

/* lora_add(x, y, bf16, a, b, a_lanes, b_lanes, wbf16, scale, parts, num_parts, in, out, rows, groups, num_groups,
 * threads) */
static PyObject* py_lora_add(PyObject* self, PyObject* args) {
    unsigned long long x, y, a, b, a_lanes, b_lanes, scale, parts, rows, groups;
    int bf16, wbf16, num_parts, in, out, num_groups, threads;
    if (!PyArg_ParseTuple(args, "KKiKKKKiKKiiiKKii", &x, &y, &bf16, &a, &b, &a_lanes, &b_lanes, &wbf16, &scale, &parts,
                          &num_parts, &in, &out, &rows, &groups, &num_groups, &threads))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    lora_add((const void*)x, (void*)y, bf16, (const void*)a, (const void*)b, (size_t)a_lanes, (size_t)b_lanes, wbf16,
             (const float*)scale, (const int32_t*)parts, num_parts, in, out, (const int32_t*)rows,
             (const int32_t*)groups, num_groups, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* paged_attention(q, k, v, out, new_k, new_v, slots, num_new, k_row, k_head, v_row, v_head, seqs, tables, num_seqs,
 * width, heads, kv_heads, dim, block_size, block_stride, position_stride, head_stride, scale, bf16, threads, max_ctx):
 * the step's new keys and values written into the caches first (kv_write), then the attention. */
static PyObject* py_paged_attention(PyObject* self, PyObject* args) {
    unsigned long long q, k, v, out, new_k, new_v, slots, seqs, tables;
    int num_new, num_seqs, width, heads, kv_heads, dim, block_size, bf16, threads, max_ctx;
    long long news[4], strides[3];
    float scale;
    if (!PyArg_ParseTuple(args, "KKKKKKKiLLLLKKiiiiiiLLLfiii", &q, &k, &v, &out, &new_k, &new_v, &slots, &num_new,
                          &news[0], &news[1], &news[2], &news[3], &seqs, &tables, &num_seqs, &width, &heads,
                          &kv_heads, &dim, &block_size, &strides[0], &strides[1], &strides[2], &scale, &bf16,
                          &threads, &max_ctx))
        return NULL;
    const int64_t steps[3] = {strides[0], strides[1], strides[2]}, new_steps[4] = {news[0], news[1], news[2], news[3]};
    float* scratch = malloc(sizeof(float) * (size_t)(threads > 1 ? threads : 1) * (max_ctx + 16));
    if (!scratch) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    kv_write((const void*)new_k, (const void*)new_v, (void*)k, (void*)v, (const int64_t*)slots, num_new, new_steps,
             kv_heads, dim, block_size, steps, bf16 ? 2 : 4);
    paged_attention((const void*)q, (const void*)k, (const void*)v, (void*)out, (const int32_t*)seqs,
                    (const int32_t*)tables, num_seqs, width, heads, kv_heads, dim, block_size, steps, scale, bf16,
                    threads, scratch, max_ctx + 16);
    Py_END_ALLOW_THREADS
    free(scratch);
    Py_RETURN_NONE;
}

#endif

static PyMethodDef methods[] = {
    {"supported", supported, METH_NOARGS, "whether this CPU runs the kernels"},
    {"vendor", vendor, METH_NOARGS, "the CPU's maker: intel, amd or empty"},
#if HAVE_KERNELS
    {"quant_matmul", py_quant_matmul, METH_VARARGS, "y = x @ w.T for packed 4- or 8-bit w"},
    {"rms_norm", py_rms_norm, METH_VARARGS, "RMSNorm of bf16 rows, torch's bits"},
    {"rope", py_rope, METH_VARARGS, "rotary embedding of bf16 rows, torch's bits"},
    {"lora_add", py_lora_add, METH_VARARGS, "y[rows] += each slot's LoRA delta"},
    {"paged_attention", py_paged_attention, METH_VARARGS, "few query rows a sequence over paged K/V"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu(void) { return PyModule_Create(&module); }
