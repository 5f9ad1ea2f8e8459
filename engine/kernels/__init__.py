"""GPU kernels (Triton), imported only on CUDA: a CPU engine never imports triton (the CPU image leaves it out)."""
