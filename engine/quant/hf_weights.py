"""A quantized Hugging Face checkpoint's tensors by parameter name (the interface of gguf_weights.GGUFWeights):
a quantized linear's `<module>.weight` comes back as `weights.QuantWeight` decoded from the format's own tensors
(hf_decode.py), never as a float copy; everything else (norms, embeddings, biases, unquantized modules) as the
float tensor it is stored as."""

import pathlib

import torch
from floodway.engine.quant import hf_decode
from floodway.engine.quant.formats import Scheme
from floodway.engine.quant.weights import QuantWeight

# A quantized module's tensors by layout: (those it must have, the first marking it quantized; optional ones).
TENSORS = {"awq": (("qweight", "qzeros", "scales"), ()), "gptq": (("qweight", "qzeros", "scales"), ("g_idx",)),
           "packed": (("weight_packed", "weight_scale"), ("weight_zero_point", "weight_shape", "weight_g_idx")),
           "e4m3": (("weight_scale", "weight"), ())}


class HFQuantWeights:
    def __init__(self, folder: str, scheme: Scheme):
        from safetensors import SafetensorError, safe_open

        self.path, self.scheme = folder, scheme
        files = sorted(pathlib.Path(folder).glob("*.safetensors"))
        if not files:
            raise ValueError(f"{folder}: no *.safetensors files (quantized checkpoints load from safetensors)")
        self.files = {}
        for f in files:
            try:
                handle = safe_open(str(f), "pt")
            except (SafetensorError, OSError) as e:
                raise ValueError(f"{f} is not a readable safetensors file ({e}; a truncated download?)") from None
            self.files.update({name: handle for name in handle.keys()})
        self.required, self.optional = TENSORS[scheme.layout]

    def _tensor(self, name: str) -> torch.Tensor:
        try:
            return self.files[name].get_tensor(name)
        except KeyError:
            raise ValueError(f"{self.path} lacks tensor {name}") from None
        except Exception as e:  # safetensors raises its own errors on bytes it cannot read
            raise ValueError(f"{self.path}: tensor {name} cannot be read ({type(e).__name__}: {e})") from None

    def _quantized(self, hf_name: str) -> bool:
        prefix = hf_name.removesuffix(".weight")
        return hf_name.endswith(".weight") and f"{prefix}.{self.required[0]}" in self.files

    def has(self, hf_name: str) -> bool:
        return hf_name in self.files or self._quantized(hf_name)

    def get(self, hf_name: str, shape: tuple[int, ...]) -> QuantWeight | torch.Tensor:
        """The tensor for a Hugging Face parameter, checked against its expected shape."""
        if not self._quantized(hf_name):
            t = self._tensor(hf_name)
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"{self.path}: tensor {hf_name} has shape {list(t.shape)}, the model expects "
                                 f"{list(shape)}")
            return t.float()
        prefix, (out_f, in_f), s = hf_name.removesuffix(".weight"), shape, self.scheme
        t = {k: self._tensor(f"{prefix}.{k}") for k in self.required}
        t.update({k: self._tensor(f"{prefix}.{k}") for k in self.optional if f"{prefix}.{k}" in self.files})
        if s.layout == "awq":
            return hf_decode.awq(prefix, t, out_f, in_f, s.group, s.name)
        if s.layout == "gptq":
            return hf_decode.gptq(prefix, t, out_f, in_f, s.bits, s.group, s.zero_offset, s.name)
        if s.layout == "packed":
            return hf_decode.packed(prefix, t, out_f, in_f, s.bits, s.group, s.name)
        return hf_decode.e4m3(prefix, t, out_f, in_f, s.name)
