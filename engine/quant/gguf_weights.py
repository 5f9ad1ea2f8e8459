"""A GGUF file's tensors by Hugging Face parameter name: Q8_0, Q4_0 and Q4_1 as their codes and per-block scales
(`weights.QuantWeight`, never a float copy), F32/F16/BF16 as float tensors.

Block layouts (ggml's): Q8_0 = fp16 d, 32 int8 q (w = d q); Q4_0 = fp16 d, 16 bytes of nibbles (w = d (q - 8));
Q4_1 = fp16 d, fp16 m, 16 bytes (w = d q + m); byte j holds element j in its low nibble and element j + 16 in its
high one. llama.cpp's converter reorders the rows of Llama-architecture q/k projections for its rope layout;
`get` undoes it (rows only, so codes and scales move together).
"""

import numpy as np
import torch
from floodway.engine.quant.weights import QuantWeight

ARCHITECTURES = ("llama", "qwen2")


def _types():
    import gguf

    t = gguf.GGMLQuantizationType
    return {t.Q8_0: (8, 34), t.Q4_0: (4, 18), t.Q4_1: (4, 20)}, (t.F32, t.F16, t.BF16)


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
        quant, floats = _types()
        if t.tensor_type in floats:
            import gguf

            value = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32))
            return self._unpermute(hf_name, value.reshape(shape).float())
        if t.tensor_type not in quant:
            raise ValueError(f"{self.path}: tensor {name} is {t.tensor_type.name}; GGUF files load here with Q8_0, "
                             f"Q4_0, Q4_1, F32, F16 or BF16 tensors (requantize with llama-quantize, or serve a float "
                             f"checkpoint with --quantization none)")
        bits, size = quant[t.tensor_type]
        out_f, in_f = shape
        data = np.asarray(t.data)
        if data.size != out_f * in_f // 32 * size:
            raise ValueError(f"{self.path}: tensor {name} holds {data.size} bytes, {t.tensor_type.name} {list(shape)} "
                             f"needs {out_f * in_f // 32 * size} (a truncated file?)")
        return self._unpermute(hf_name, decode(data.reshape(out_f, in_f // 32, size), t.tensor_type.name))

    def _unpermute(self, hf_name: str, w):
        if self.arch != "llama" or not hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            return w
        heads = self.heads if "q_proj" in hf_name else self.kv_heads
        rows = w.shape[0]
        # the converter's order: hf rows [heads, 2, half] read as [heads, half, 2]
        index = torch.arange(rows).reshape(heads, 2, rows // heads // 2).transpose(1, 2).reshape(rows)
        inverse = torch.argsort(index)
        return w.rows(inverse) if isinstance(w, QuantWeight) else w[inverse]


def decode(blocks: np.ndarray, kind: str) -> QuantWeight:
    """blocks uint8 [out, in // 32, block bytes] of one ggml type -> its codes and per-block scales (pure)."""
    out_f, groups, _ = blocks.shape
    d = torch.from_numpy(np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0].astype(np.float32))
    if kind == "Q8_0":
        q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).astype(np.int16) + 128
        codes, bits, mins = q.astype(np.uint8), 8, -128 * d
    else:
        packed = blocks[..., 4:] if kind == "Q4_1" else blocks[..., 2:]
        codes, bits = np.concatenate([packed & 15, packed >> 4], -1), 4
        mins = (torch.from_numpy(np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)[..., 0].astype(np.float32))
                if kind == "Q4_1" else -8 * d)
    return QuantWeight(torch.from_numpy(codes).reshape(out_f, groups * 32), d, mins, bits, 32, kind)
