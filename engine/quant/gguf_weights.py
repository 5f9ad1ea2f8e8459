"""A GGUF file's tensors by Hugging Face parameter name: quantized types as their codes and per-group scales and
offsets (`weights.QuantWeight`, never a float copy), F32/F16/BF16 as float tensors.

Block layouts (ggml's; a nibble pair in byte j holds element j low and j + 16 high unless said otherwise):
- Q8_0: fp16 d, 32 int8 q; w = d q.  Q4_0: fp16 d, 16 bytes of nibbles; w = d (q - 8).  Q4_1: d, m, nibbles;
  w = d q + m.  Q5_0 / Q5_1: as Q4_0 / Q4_1 with a 32-bit word of fifth bits (bit j for element j) after the
  fp16s; w = d (q - 16) / d q + m.
- K-quants, super-blocks of 256: Q4_K / Q5_K: fp16 d and dmin, 12 bytes of eight 6-bit scales and mins, (Q5_K: 32
  bytes of fifth bits,) 128 bytes of nibbles in four runs of 64 elements (32 low, then 32 high); w = d sc q - dmin m
  per 32 elements. Q6_K: 128 bytes of low nibbles, 64 of 2-bit high parts, sixteen int8 scales, fp16 d;
  w = d sc (q - 32) per 16 elements. Q2_K: sixteen bytes of a 4-bit scale (low) and min (high), 64 bytes of 2-bit
  codes, fp16 d and dmin; w = d sc q - dmin m per 16. Q3_K: 32 bytes of third bits, 64 of 2-bit codes, twelve bytes
  of sixteen 6-bit scales, fp16 d; w = d (sc - 32) (q - 4) per 16. The 2-bit codes of a half of 128 elements: byte
  l's bits 2j and 2j + 1 are element 32j + l's; Q3_K's third bit of element 128n + 32j + l is bit 4n + j of byte l.
Each maps into QuantWeight exactly: scale d sc and offset -dmin m (or -16 d, -32 d sc, -4 d sc) are products of an
fp16 and a small integer, exact in float32; 2- and 3-bit codes are held as 4-bit ones, 5- and 6-bit as 8-bit.
llama.cpp's converter reorders the rows of Llama-architecture q/k projections for its rope layout; `get` undoes it
(rows only, so codes and scales move together).
"""

import numpy as np
import torch
from floodway.engine.quant.weights import QuantWeight

ARCHITECTURES = ("llama", "qwen2")


# type -> (elements, bytes) per block
BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
          "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}
FLOATS = ("F32", "F16", "BF16")


class GGUFWeights:
    def __init__(self, path: str):
        import gguf

        try:
            self.reader = gguf.GGUFReader(path)
        except Exception as e:  # the reader raises ValueError, struct.error, IndexError... on bad bytes
            raise ValueError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})") from None
        self.path = path
        self.arch = self.field("general.architecture")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"{path}: GGUF architecture {self.arch!r} is not served here (we load {ARCHITECTURES})")
        self.tensors = {t.name: t for t in self.reader.tensors}
        blocks = int(self.field(f"{self.arch}.block_count"))
        self.names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if self.arch == "llama" else gguf.MODEL_ARCH.QWEN2,
                                              blocks)
        self.heads = int(self.field(f"{self.arch}.attention.head_count"))
        self.kv_heads = int(self.field(f"{self.arch}.attention.head_count_kv", self.heads))

    def field(self, key: str, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            if default is None:
                raise ValueError(f"{self.path}: GGUF metadata lacks {key}")
            return default
        return f.contents()

    def gguf_name(self, hf_name: str) -> str | None:
        return self.names.get_name(hf_name, try_suffixes=(".weight", ".bias"))

    def has(self, hf_name: str) -> bool:
        return self.gguf_name(hf_name) in self.tensors

    def get(self, hf_name: str, shape: tuple[int, ...]) -> QuantWeight | torch.Tensor:
        """The tensor for a Hugging Face parameter, checked against its expected shape."""
        name = self.gguf_name(hf_name)
        if name not in self.tensors:
            raise ValueError(f"{self.path} lacks tensor {name} (for {hf_name})")
        t = self.tensors[name]
        dims = tuple(int(d) for d in reversed(t.shape))  # GGUF lists the fastest dimension first
        if dims != tuple(shape):
            raise ValueError(f"{self.path}: tensor {name} has shape {list(dims)}, the model expects {list(shape)}")
        kind = t.tensor_type.name
        if kind in FLOATS:
            import gguf

            value = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32))
            return self._unpermute(hf_name, value.reshape(shape).float())
        if kind not in BLOCKS:
            raise ValueError(f"{self.path}: tensor {name} is {kind}; GGUF files load here with "
                             f"{', '.join([*BLOCKS, *FLOATS])} tensors (requantize with llama-quantize, or serve a "
                             f"float checkpoint with --quantization none)")
        elements, size = BLOCKS[kind]
        out_f, in_f = shape
        data = np.asarray(t.data)
        if in_f % elements or data.size != out_f * in_f // elements * size:
            raise ValueError(f"{self.path}: tensor {name} holds {data.size} bytes, {kind} {list(shape)} needs "
                             f"{out_f * in_f // elements * size} (a truncated file?)")
        return self._unpermute(hf_name, decode(data.reshape(out_f, in_f // elements, size), kind))

    def _unpermute(self, hf_name: str, w):
        if self.arch != "llama" or not hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            return w
        heads = self.heads if "q_proj" in hf_name else self.kv_heads
        rows = w.shape[0]
        # the converter's order: hf rows [heads, 2, half] read as [heads, half, 2]
        index = torch.arange(rows).reshape(heads, 2, rows // heads // 2).transpose(1, 2).reshape(rows)
        inverse = torch.argsort(index)
        return w.rows(inverse) if isinstance(w, QuantWeight) else w[inverse]


def _f16(b: np.ndarray, at: int) -> torch.Tensor:
    """The fp16 at byte `at` of each block, as float32 [..., 1]."""
    return torch.from_numpy(np.ascontiguousarray(b[..., at:at + 2]).view(np.float16).astype(np.float32))


def _nibbles(b: np.ndarray) -> np.ndarray:
    """bytes [..., n] -> [..., 2n]: every low nibble, then every high one."""
    return np.concatenate([b & 15, b >> 4], -1)


def _bits(b: np.ndarray) -> np.ndarray:
    """bytes [..., n] -> [..., n, 8]: each byte's bits, lowest first."""
    return np.unpackbits(b[..., None], -1, bitorder="little")


def _pairs(b: np.ndarray) -> np.ndarray:
    """bytes [..., n] -> [..., 4, n]: the 2-bit fields at bits 0, 2, 4 and 6 of each byte, one plane per field."""
    return (b[..., None, :] >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes -> eight 6-bit scales and mins: the first four in the low 6 bits of bytes 0-3 and 4-7,
    the last four in the nibbles of bytes 8-11 with their top two bits in the top bits of bytes 0-3 and 4-7."""
    sc = np.concatenate([b[..., 0:4] & 63, (b[..., 8:12] & 15) | ((b[..., 0:4] >> 6) << 4)], -1)
    m = np.concatenate([b[..., 4:8] & 63, (b[..., 8:12] >> 4) | ((b[..., 4:8] >> 6) << 4)], -1)
    return sc, m


def decode(blocks: np.ndarray, kind: str) -> QuantWeight:
    """blocks uint8 [out, in // block elements, block bytes] of one ggml type -> codes and per-group scales (pure)."""
    out_f, n = blocks.shape[:2]
    t = torch.from_numpy
    if kind in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        d = _f16(blocks, 0)
        if kind == "Q8_0":
            codes, bits, mins = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).astype(np.int16) + 128, 8, -128 * d
        else:
            offset = kind.endswith("_1")  # a min after d
            at = 4 if offset else 2
            codes, bits = _nibbles(blocks[..., at + 4 * (kind[1] == "5"):]), 4
            if kind[1] == "5":  # fifth bits: bit j of the little-endian word for element j
                codes = codes | _bits(blocks[..., at:at + 4]).reshape(out_f, n, 32) << 4
                bits = 8
            mins = _f16(blocks, 2) if offset else -(2 ** (3 + (kind[1] == "5"))) * d
        return QuantWeight(t(codes.astype(np.uint8)).reshape(out_f, n * 32), d[..., 0], mins[..., 0], bits, 32, kind)
    if kind in ("Q4_K", "Q5_K"):
        d, dmin = _f16(blocks, 0), _f16(blocks, 2)
        sc, m = _k_scales(blocks[..., 4:16])
        qs = blocks[..., -128:].reshape(out_f, n, 4, 32)
        codes = _nibbles(qs)  # [out, n, 4 runs, 64]
        bits = 4
        if kind == "Q5_K":  # bits 2r and 2r + 1 of byte l: elements l of run r's low and high halves
            high = _bits(blocks[..., 16:48])  # [out, n, 32 l, 8 bits]
            codes = codes | (high.transpose(0, 1, 3, 2).reshape(out_f, n, 4, 64) << 4)
            bits = 8
        scales, mins = d * t(sc.astype(np.float32)), -dmin * t(m.astype(np.float32))
        return QuantWeight(t(codes.astype(np.uint8)).reshape(out_f, n * 256), scales.reshape(out_f, n * 8),
                           mins.reshape(out_f, n * 8), bits, 32, kind)
    if kind == "Q6_K":
        # each half of 128: 64 bytes of nibbles (elements l and l + 32 low, l + 64 and l + 96 high) and 32 bytes
        # holding the high 2 bits of elements l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6 of byte l
        low = _nibbles(blocks[..., :128].reshape(out_f, n, 2, 64))
        high = _pairs(blocks[..., 128:192].reshape(out_f, n, 2, 32))  # [.., half, 4, 32]
        codes = low | (high.reshape(out_f, n, 2, 128) << 4)
        scales = _f16(blocks, 208) * t(np.ascontiguousarray(blocks[..., 192:208]).view(np.int8).astype(np.float32))
        return QuantWeight(t(codes.astype(np.uint8)).reshape(out_f, n * 256), scales.reshape(out_f, n * 16),
                           (-32 * scales).reshape(out_f, n * 16), 8, 16, kind)
    if kind in ("Q2_K", "Q3_K"):
        at = 32 if kind == "Q3_K" else 16  # the 2-bit codes follow Q3_K's third bits, Q2_K's scales
        # [.., half, j, l]: element 128 half + 32 j + l
        codes = _pairs(blocks[..., at:at + 64].reshape(out_f, n, 2, 32))
        if kind == "Q2_K":
            d, dmin, sc = _f16(blocks, 80), _f16(blocks, 82), blocks[..., :16]
            scales, mins = d * t((sc & 15).astype(np.float32)), -dmin * t((sc >> 4).astype(np.float32))
        else:
            third = _bits(blocks[..., :32])  # [.., l, bit 4 half + j]
            codes = codes | (third.transpose(0, 1, 3, 2).reshape(out_f, n, 2, 4, 32) << 2)
            b = blocks[..., 96:108]
            low = _nibbles(b[..., :8])  # scale i's low 4 bits: byte i's low nibble, byte i - 8's high one
            high = _pairs(b[..., 8:12])  # [.., i // 4, i % 4]: scale i's top 2 bits
            sc = low.astype(np.int16) | (high.reshape(out_f, n, 16) << 4)
            scales = _f16(blocks, 108) * t((sc - 32).astype(np.float32))
            mins = -4 * scales
        return QuantWeight(t(codes.astype(np.uint8)).reshape(out_f, n * 256), scales.reshape(out_f, n * 16),
                           mins.reshape(out_f, n * 16), 4, 16, kind)
    raise ValueError(f"no decoder for GGUF type {kind}")
