"""Our kernels: GPU ones in Triton, imported only on CUDA (a CPU engine never imports triton; the CPU image leaves it
out), and CPU ones in C (the int4 matmul, the LoRA deltas and paged attention: cpu_*.c, one module built by setup.py,
cpu.py)."""
