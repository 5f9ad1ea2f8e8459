"""Random GGUF blocks of every type the engine loads, with the `gguf` package's own dequantization as their
reference. Random bytes are valid blocks once their fp16 fields hold finite values, so every code and scale pattern
is covered, K-quants included (the package dequantizes K-quants but has no packer for them)."""

import numpy as np
from floodway.engine.quant.gguf_weights import BLOCKS

FP16_AT = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q4_K": (0, 2),
           "Q5_K": (0, 2), "Q6_K": (208,), "Q2_K": (80, 82), "Q3_K": (108,)}  # byte offsets of each block's fp16 fields


def random_blocks(kind: str, out_f: int, in_f: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 blocks [out_f, in_f // block elements, block bytes], the gguf package's float32 values [out_f, in_f])."""
    import gguf

    rng = np.random.default_rng(seed)
    elements, size = BLOCKS[kind]
    b = rng.integers(0, 256, (out_f, in_f // elements, size), dtype=np.uint8)
    for at in FP16_AT[kind]:
        b[..., at:at + 2] = rng.normal(0, 0.01, (out_f, in_f // elements, 1)).astype(np.float16).view(np.uint8)
    return b, gguf.quants.dequantize(b.reshape(out_f, -1), gguf.GGMLQuantizationType[kind])
