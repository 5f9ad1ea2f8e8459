"""Weight-only quantized linears: one weight form (`weights.QuantWeight`), loaders that fill it (round-to-nearest at
load, GGUF files), and the kernels that multiply by it, chosen once at load per device (`linear.py`)."""
