"""The LoRA wrapper around any linear of our decoder (float, packed bf16, quantized): y = base(x) + delta(x), where
row t's delta is x_t @ A[slot_t] @ B[slot_t] * scale[slot_t] and rows of the base model get none.

The slot stacks (A [S, in, P*R] and B [S, P*R, out], or both packed as our CPU kernel reads them where it serves;
scale [S, 1, 1]) are filled by `Slots.load`; the step's rows come from the shared `StepState`, set by the runner
around each forward (None: the step has no adapter rows).
"""

import torch
from floodway.engine.kernels import cpu_lora
from floodway.engine.lora import batch
from floodway.engine.lora.batch import DeviceBatch
from floodway.engine.lora.peft_format import Geometry
from torch import nn


def adapter_dtype(device, dtype: torch.dtype) -> torch.dtype:
    """The adapters' dtype beside a model of `dtype` on `device`: the model's, but float32 on CPU without our kernel
    (oneDNN's bf16 matmul costs about 15 us a call however small, float32's 3-4 us, and torch's path makes two per
    adapter run on every linear). Our kernel computes in float32 whatever it reads: bf16 halves the bytes a step
    reads, which bound decodes spread over many adapters."""
    return torch.float32 if torch.device(device).type == "cpu" and not batch.CPU_KERNEL else dtype


class StepState:
    batch: DeviceBatch | None = None


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Module, step: StepState, slots: int, in_features: int, rank: int,
                 outs: tuple[int, ...], scale: torch.Tensor, device, dtype):
        """outs: the fused parts' output sizes (q, k, v; gate, up; or one), each with its own `rank` columns of A."""
        super().__init__()
        self.base, self.step, self.scale = base, step, scale
        self.in_features, self.out_features = base.in_features, base.out_features
        # Each part's block of B (its rank's rows, its output's columns); the rest of B is zeros, which the padded
        # bmm skips and our CPU kernel does not store: a third of q/k/v's bytes, half of gate/up's.
        self.parts = [(p * rank, (p + 1) * rank, sum(outs[:p]), sum(outs[:p + 1])) for p in range(len(outs))]
        self.part_bounds = torch.tensor(self.parts, dtype=torch.int32)  # the same, for our CPU kernel
        self.packed = batch.CPU_KERNEL and torch.device(device).type == "cpu"
        width = len(outs) * rank
        shapes = [(n,) for n in cpu_lora.packed_sizes(in_features, self.parts, dtype)] if self.packed else \
            [(in_features, width), (width, sum(outs))]
        self.lora_a, self.lora_b = (torch.zeros(slots, *shape, device=device, dtype=dtype) for shape in shapes)
        if self.packed:  # our kernel's per-linear arguments, made once: the stacks are filled in place, never replaced
            assert scale.dtype == torch.float32 and scale.is_contiguous()
            lanes = [t.stride(0) * t.element_size() // 4 for t in (self.lora_a, self.lora_b)]  # a slot's, in 32 bits
            self.kernel_args = (self.lora_a.data_ptr(), self.lora_b.data_ptr(), *lanes, int(dtype == torch.bfloat16),
                                scale.data_ptr(), self.part_bounds.data_ptr(), len(self.parts), in_features,
                                sum(outs))

    def load(self, slot: int, pair: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Copies one adapter's A [in, W] and B [W, out] (or zeros: None) into `slot`, packed where our CPU kernel
        reads them."""
        if pair is None:
            self.lora_a[slot].zero_()
            self.lora_b[slot].zero_()
            return
        a, b = (t.to(self.lora_a.dtype) for t in pair)
        for stack, t in zip((self.lora_a, self.lora_b), cpu_lora.pack(a, b, self.parts) if self.packed else (a, b),
                            strict=True):
            stack[slot].copy_(t)

    @property
    def kernel(self) -> str:
        from floodway.engine.quant.linear import kernel_of

        how = "Triton segment matmul" if self.lora_a.is_cuda else \
            "our CPU kernel" if batch.CPU_KERNEL else "sliced runs or a rank-padded bmm"
        return f"{kernel_of(self.base)} + LoRA ({how} over {self.lora_a.shape[0]} slots)"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        b = self.step.batch
        if b is None:
            return y
        if b.kernel is not None:  # CUDA: the Triton kernels; CPU: ours (every run in one call)
            return b.kernel.add(y, x, self)
        # torch's path (adapters float32 on CPU): the deltas sum in float32, added to a bf16 output once.
        x = x.to(self.lora_a.dtype)
        acc = y if y.dtype == x.dtype else torch.zeros(y.shape, dtype=x.dtype, device=y.device)
        for slot, start, end in b.runs:
            acc[start:end].addmm_(torch.mm(x[start:end], self.lora_a[slot]), self.lora_b[slot], alpha=b.scales[slot])
        if b.rows is not None:
            k, m = b.num_slots, b.per_slot
            xp = x.index_select(0, b.gather).view(k, m, -1)
            t, b_k = torch.bmm(xp, self.lora_a[:k]), self.lora_b[:k]
            d = torch.cat([torch.bmm(t[:, :, r0:r1], b_k[:, r0:r1, c0:c1]) for r0, r1, c0, c1 in self.parts], 2) \
                if len(self.parts) > 1 else torch.bmm(t, b_k)
            d.mul_(self.scale[:k])
            acc.index_add_(0, b.rows, d.view(k * m, -1).index_select(0, b.dest))
        return y if acc is y else y.add_(acc)


class Slots:
    """The resident adapters' weights: every wrapped linear's stacks, and one scale per slot."""

    def __init__(self, decoder, geometry: Geometry, num_slots: int, max_rank: int, device, dtype):
        self.step = StepState()
        self.scale = torch.zeros(num_slots, 1, 1, device=device, dtype=torch.float32)
        self.linears: dict[tuple[int, str], LoRALinear] = {}
        for i, layer in enumerate(decoder.layers):
            for name, (n_in, outs) in geometry.linears.items():
                wrapped = LoRALinear(getattr(layer, name), self.step, num_slots, n_in, max_rank, tuple(outs),
                                     self.scale, device, dtype)
                setattr(layer, name, wrapped)
                self.linears[i, name] = wrapped

    def load(self, slot: int, weights) -> None:
        """Copies an AdapterWeights into a slot (zeros where it has no weights)."""
        for key, lin in self.linears.items():
            lin.load(slot, weights.tensors.get(key))
        self.scale[slot] = weights.scale
