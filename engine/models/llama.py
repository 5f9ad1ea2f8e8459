"""Our decoder for the Llama family (Llama, Mistral, Qwen2): a decode step makes fewer kernel and linear calls per
layer than transformers' modules do, so it pays less per-call overhead.

Built from transformers' loaded model, taking over its weights: q/k/v merged into one linear and gate/up into one
(fewer, larger matmuls), the rest shared as they are (a tied head keeps the embedding's tensor). Per layer: RMSNorm
and RoPE (each one call of our kernel on CPU in bf16, with torch's bits: `kernels/cpu_norm.py`, `kernels/cpu_rope.py`;
torch's ops elsewhere), RoPE's cos/sin table computed once for max_model_len by the model's own rotary module (so any
static rope scaling, llama3 or yarn included, stays transformers'), our paged attention (`attention.attend`, the code
the transformers path calls too), SiLU times up, residual adds in place.
Called as the transformers model is (`model(input_ids=, position_ids=, logits_to_keep=, floodway_meta=)`, `.logits`),
so the runner and the CUDA graphs drive either.
"""

import threading
from typing import NamedTuple

import torch
import torch.nn.functional as F
from floodway.engine import attention
from floodway.engine.kernels import cpu_norm, cpu_rope
from torch import nn

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
# Rope types whose frequencies do not depend on the sequence length (dynamic and longrope do: transformers' path).
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def supports(hf_model) -> bool:
    """Whether our decoder computes what this transformers model does (pure)."""
    cfg = hf_model.config
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    return type(hf_model).__name__ in ARCHITECTURES and rope in STATIC_ROPE and cfg.hidden_act == "silu"


# The step a compiled decode is running: the compiled graph calls attention as the opaque op below, whose step
# metadata (Python lists of groups) cannot be a graph input.
_compiled_step = threading.local()


@torch.library.custom_op("floodway::attend", mutates_args=())
def _attend_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, scaling: float) -> torch.Tensor:
    # It writes k, v into the layer's cache, which is no graph input, so the graph has nothing to reorder around it.
    return attention.attend(_compiled_step.meta, layer, q, k, v, scaling)


@_attend_op.register_fake
def _(q, k, v, layer, scaling):
    return torch.empty_like(q)


class Output(NamedTuple):
    logits: torch.Tensor  # [1, kept rows, V]


def _merged(*linears: nn.Linear) -> nn.Linear:
    """One linear computing the given ones' outputs side by side."""
    ws = [lin.weight for lin in linears]
    out = nn.Linear(ws[0].shape[1], sum(w.shape[0] for w in ws), bias=linears[0].bias is not None,
                    device=ws[0].device, dtype=ws[0].dtype)
    out.weight = nn.Parameter(torch.cat(ws).detach(), requires_grad=False)
    if out.bias is not None:
        out.bias = nn.Parameter(torch.cat([lin.bias for lin in linears]).detach(), requires_grad=False)
    return out


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, x.shape[-1:], weight, eps)


def torch_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, hd] rotated: rotate_half(x) * sin, with rotate_half's sign folded into the table: x's halves swapped
    times sin."""
    t, n, hd = x.shape
    return torch.addcmul(x * cos, x.view(t, n, 2, hd // 2).flip(2).view(t, n, hd), sin)


class DecoderLayer(nn.Module):
    def __init__(self, hf_layer, layer: int):
        super().__init__()
        a, m = hf_layer.self_attn, hf_layer.mlp
        self.layer, self.scaling, self.head_dim = layer, a.scaling, a.head_dim
        self.num_heads = a.q_proj.out_features // a.head_dim
        self.num_kv_heads = a.k_proj.out_features // a.head_dim
        self.qkv = _merged(a.q_proj, a.k_proj, a.v_proj)
        self.o_proj = a.o_proj
        self.gate_up = _merged(m.gate_proj, m.up_proj)
        self.down_proj = m.down_proj
        self.norm1, self.norm2 = hf_layer.input_layernorm.weight, hf_layer.post_attention_layernorm.weight
        self.eps = hf_layer.input_layernorm.variance_epsilon
        self.rms_norm, self.rope = torch_rms_norm, torch_rope  # LlamaDecoder sets the model's
        for mod, names in ((a, ("q_proj", "k_proj", "v_proj")), (m, ("gate_proj", "up_proj"))):
            for name in names:  # freed now: loading keeps one layer's unmerged copy at a time, not the model's
                delattr(mod, name)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: attention.StepMeta) -> None:
        """Adds this layer's attention and MLP outputs to h [T, D] in place."""
        t, hd, nq, nkv = h.shape[0], self.head_dim, self.num_heads, self.num_kv_heads
        qkv = self.qkv(self.rms_norm(h, self.norm1, self.eps))
        qk = self.rope(qkv[:, :(nq + nkv) * hd].view(t, nq + nkv, hd), cos, sin)
        v = qkv[:, (nq + nkv) * hd:].view(t, nkv, hd)
        q, k = qk[:, :nq], qk[:, nq:]
        o = _attend_op(q, k, v, self.layer, self.scaling) if torch.compiler.is_compiling() \
            else attention.attend(meta, self.layer, q, k, v, self.scaling)
        h += self.o_proj(o.view(t, nq * hd))
        gu = self.gate_up(self.rms_norm(h, self.norm2, self.eps))
        inter = gu.shape[-1] // 2
        h += self.down_proj(F.silu(gu[:, :inter]).mul_(gu[:, inter:]))


class LlamaDecoder(nn.Module):
    def __init__(self, hf_model, max_model_len: int):
        super().__init__()
        base = hf_model.model
        self.embed_tokens, self.lm_head = base.embed_tokens, hf_model.lm_head
        self.norm, self.eps = base.norm.weight, base.norm.variance_epsilon
        self.layers = nn.ModuleList(DecoderLayer(layer, i) for i, layer in enumerate(base.layers))
        w = self.norm
        self.rms_norm = cpu_norm.for_width(w, self.eps) or torch_rms_norm
        rope = cpu_rope.for_head_dim(self.layers[0].head_dim, w.dtype, w.device) or torch_rope
        for layer in self.layers:
            layer.rms_norm, layer.rope = self.rms_norm, rope
        # transformers' own cos/sin for every position (its scaling and rounding), computed once.
        cos, sin = base.rotary_emb(w, torch.arange(max_model_len, device=w.device)[None])
        half = cos.shape[-1] // 2
        sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(w.device, w.dtype)
        self.register_buffer("cos", cos[0].unsqueeze(1), persistent=False)  # [max_model_len, 1, head_dim]
        self.register_buffer("sin", (sin[0] * sign).unsqueeze(1), persistent=False)
        self.compiled_layers = None

    def compile_decode(self) -> None:
        """Runs the layers of decode-only CPU steps as one torch.compile graph (inductor's C++ code; compiled on the
        first such step, once for batch 1 and once for the rest: dynamic shapes). Prefill steps stay eager."""
        for layer in self.layers:  # torch's ops: a graph cannot hold our kernels' calls by address
            layer.rms_norm, layer.rope = torch_rms_norm, torch_rope
        self.compiled_layers = torch.compile(self._layers, dynamic=True)

    def _layers(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: attention.StepMeta | None) -> None:
        for layer in self.layers:
            layer(h, cos, sin, meta)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, floodway_meta: attention.StepMeta,
                logits_to_keep: torch.Tensor | None = None, **_) -> Output:
        """input_ids, position_ids [1, T]; logits of the rows in logits_to_keep (all when None)."""
        pos = position_ids[0]
        h = self.embed_tokens(input_ids[0])
        cos, sin = self.cos[pos], self.sin[pos]
        if self.compiled_layers is not None and floodway_meta.decodes_only():
            _compiled_step.meta = floodway_meta
            self.compiled_layers(h, cos, sin, None)
        else:
            self._layers(h, cos, sin, floodway_meta)
        if logits_to_keep is not None:
            h = h[logits_to_keep]
        return Output(self.lm_head(self.rms_norm(h, self.norm, self.eps)).unsqueeze(0))
