"""Our kernels: GPU ones in Triton, imported only on CUDA (a CPU engine never imports triton; the CPU image leaves it
out), and the CPU int4 matmul in C (cpu_int4.c, built by setup.py)."""
