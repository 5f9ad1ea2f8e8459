"""bf16 and float32 linear layers on CPU with their weights reordered once, at load, into oneDNN's blocked layout.

A plain `F.linear` on a bf16 CPU tensor hands oneDNN a row-major weight, which it repacks for its AMX/AVX512-BF16
kernels on every call; prepacked, each call only multiplies (the same reorder torch.compile's freezing pass does).
A float32 `F.linear` goes to MKL's sgemm instead, which oneDNN's blocked float32 kernel beats from a few rows on
(docs/benchmarks/engine-code-notes.md). Results equal the plain layer's up to rounding (the kernel may sum in
another order). The embedding keeps its own plain weight where the LM head is tied to it.
"""

import platform

import torch

# oneDNN picks its blocking for this many rows; the blocked weight serves any number of rows. A hint above 1, so
# that batches of 2 or more are not slower than unpacked (docs/benchmarks/engine-code-notes.md).
ROWS_HINT = 8


def supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this is an x86 CPU and torch build with oneDNN, and for bf16 its bf16 kernels (AVX512-BF16 or AMX):
    the reorder was measured only there."""
    return (device.type == "cpu" and platform.machine() in ("x86_64", "AMD64") and torch.backends.mkldnn.is_available()
            and (dtype == torch.float32 or dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()))


class PackedLinear(torch.nn.Module):
    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), ROWS_HINT)
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features  # what a LoRA wrapper reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # traced as an opaque op: inductor lowers this one only for frozen weights
            return _packed_linear(x, self.packed, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


@torch.library.custom_op("floodway::packed_linear", mutates_args=())
def _packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@_packed_linear.register_fake
def _(x, packed, bias):
    return x.new_empty(*x.shape[:-1], packed.shape[0])  # the blocked weight keeps its [out, in] sizes


def pack(model: torch.nn.Module) -> int:
    """Replaces every nn.Linear in model by a PackedLinear; returns how many."""
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child))
                count += 1
    return count
