"""The Triton batched LoRA kernels (engine/kernels/lora_matmul.py) against each row's delta in float64, through the
LoRALinear wrapper the engine runs (so its dispatch line is covered too): in Triton's interpreter on the CPU (a child
pytest with TRITON_INTERPRET=1, as test_paged_kernel.py explains), compiled on CUDA, and compiled for sm_90 without
a GPU. The slots hold adapters of different ranks in the engine's layout (q/k/v parts side by side, each padded to
the largest rank with zeros, `peft_format.place`), batched with base-model rows, long same-slot runs and a slot
with no rows; then the tiny model served with adapters generates the same tokens through the kernels as through the
CPU's gathered bmm."""

import os
import subprocess
import sys

import pytest
import torch
from floodway.engine.lora import batch, peft_format
from floodway.engine.lora.layers import LoRALinear, StepState

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"
TRITON = "triton is not installed (the CPU engine image leaves it out)"
pytestmark = pytest.mark.usefixtures("cuda_lora_layout")

if not INTERPRETED and DEVICE == "cpu":
    def test_kernels_in_triton_interpreter():
        pytest.importorskip("triton", reason=TRITON)
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONSAFEPATH": "1"}
        child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k",
                                "cases"], env=env, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
        assert " passed" in child.stdout and "skipped" not in child.stdout, child.stdout[-2000:]

    @pytest.mark.parametrize("name,block_m,block_w", [("_shrink_kernel", 16, 64), ("_shrink_kernel", 64, 16),
                                                      ("_expand_kernel", 16, 64), ("_expand_kernel", 64, 16)])
    def test_kernels_compile_for_hopper(name, block_m, block_w):
        """What the interpreter cannot show: the kernels (their early return included) pass Triton's compiler down
        to an sm_90 cubin (its bundled ptxas; no GPU needed). bf16, the GPU default; decode and prefill tiles;
        W tiles of rank 16 over q/k/v (48 in one of 64) and of o_proj (16)."""
        triton = pytest.importorskip("triton", reason=TRITON)
        from floodway.engine.kernels import lora_matmul
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        fn = getattr(lora_matmul, name)
        tile = {"BLOCK_K": lora_matmul.BLOCK_K} if "shrink" in name else {"BLOCK_N": lora_matmul.BLOCK_N}
        constexprs = dict(DOT=triton.language.bfloat16, PRECISION="tf32", BLOCK_M=block_m, BLOCK_W=block_w, **tile)
        ptrs = {"x": "*bf16", "a": "*bf16", "b": "*bf16", "y": "*bf16", "t": "*fp32", "scale": "*fp32",
                "rows": "*i32", "starts": "*i32"}
        signature = {a: "constexpr" if a in constexprs else ptrs.get(a, "i32") for a in fn.arg_names}
        compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
        assert compiled.asm["cubin"]


def test_rows_grouped_by_slot_from_the_plan():
    pytest.importorskip("triton", reason=TRITON)
    from floodway.engine.kernels.lora_matmul import Segments, by_slot

    # rows: 3 decodes (slots 1, -1, 1), a 20-row prefill of slot 0, a 2-row chunk of slot 3 (slot 2: no rows)
    p = batch.plan([1, -1, 1] + [0] * 20 + [3, 3], run_rows=16)
    rows, starts = by_slot(p.runs, p.rows, p.dest, p.per_slot)
    assert rows == list(range(3, 23)) + [0, 2, 23, 24] and starts == [0, 20, 22, 22, 24]
    seg = Segments.of(p, "cpu")
    assert (seg.num_slots, seg.most_rows) == (4, 20) and seg.rows.dtype == seg.starts.dtype == torch.int32
    assert not isinstance(batch.to_device(p, "cpu", torch.ones(4, 1, 1)).kernel, Segments)  # Triton serves CUDA


def _layer(ranks: list[int], dtype: torch.dtype, device, n_in=100, outs=(40, 16, 16), seed=0):
    """A LoRALinear with one adapter per slot, of ranks[s] on each of q/k/v (0: an empty slot), in slot layout, and
    its A and B stacks unpacked ([S, in, W], [S, W, out])."""
    gen = torch.Generator().manual_seed(seed)
    max_rank, slots = max(ranks), len(ranks)
    base = torch.nn.Linear(n_in, sum(outs), device=device, dtype=dtype)
    scale = torch.tensor([2.0 / max(r, 1) for r in ranks], device=device).view(slots, 1, 1)
    lin = LoRALinear(base, StepState(), slots, n_in, max_rank, tuple(outs), scale, device, dtype)
    a = torch.zeros(slots, n_in, len(outs) * max_rank)
    b = torch.zeros(slots, len(outs) * max_rank, sum(outs))
    for s, r in enumerate(ranks):
        for part, out in enumerate(outs):
            if r:
                peft_format.place(a[s], b[s], torch.randn(r, n_in, generator=gen) / n_in ** 0.5,
                                  torch.randn(out, r, generator=gen), part * max_rank, sum(outs[:part]))
        lin.load(s, (a[s], b[s]))
    return lin, a, b


def _want(layer, x, slots):
    """Each row's output in float64: base(x) + x A[s] B[s] scale[s], none for slot -1 (layer: `_layer`'s)."""
    lin, a, b = layer
    y = lin.base(x).double()
    a, b, scale = a.double(), b.double(), lin.scale.double().cpu()
    for t, s in enumerate(slots):
        if s >= 0:
            y[t] += (x[t].double().cpu() @ a[s] @ b[s] * scale[s, 0, 0]).to(y.device)
    return y.cpu()


def _segments(slots, device, run_rows=16):
    from floodway.engine.kernels.lora_matmul import Segments

    return batch.DeviceBatch([], None, None, None, 0, 0, Segments.of(batch.plan(slots, run_rows), device))


# (slot per row, rank per slot): decodes of 3 adapters and the base; a prefill run longer than a 16-row tile beside
# decodes, with slot 2 empty (BLOCK_M 64); rank 24 on q/k/v (W 72: a full W tile of 64 and a ragged one) beside 1
MIXES = [([2, -1, 0, 1, 1, -1, 2], [4, 2, 3]),
         ([1, -1] + [0] * 37 + [3, 3, -1, 1], [8, 2, 0, 5]),
         ([0, 1, 0, -1, 1], [24, 1])]


@pytest.mark.skipif(DEVICE == "cpu" and not INTERPRETED, reason="runs in the interpreter child on CPU")
class TestKernelCases:
    @pytest.mark.parametrize("slots,ranks", MIXES)
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_cases_match_each_rows_delta(self, slots, ranks, dtype):
        layer = lin, _, _ = _layer(ranks, dtype, DEVICE)
        x = torch.randn(len(slots), 100, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
        lin.step.batch = _segments(slots, DEVICE)
        got = lin(x).cpu().double()
        want = _want(layer, x, slots)
        tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: x A rounded to 2^-8 before B, the output too
        assert (got - want).abs().max().item() <= tol * want.abs().max().item()
        base = lin.base(x).cpu().double()
        assert torch.equal(got[[t for t, s in enumerate(slots) if s < 0]], base[[t for t, s in enumerate(slots)
                                                                                if s < 0]])

    def test_cases_rows_on_the_wrong_slot_are_caught(self):
        """The reference tells adapters apart: rows run on their neighbour slot's weights miss it by far."""
        slots = [0, 1, 0, 1, -1]
        layer = lin, _, _ = _layer([4, 4], torch.float32, DEVICE)
        x = torch.randn(len(slots), 100, generator=torch.Generator().manual_seed(2)).to(DEVICE)
        lin.step.batch = _segments([1, 0, 1, 0, -1], DEVICE)
        got, want = lin(x).cpu().double(), _want(layer, x, slots)
        assert (got - want).abs().max().item() > 0.05 * want.abs().max().item()

    def test_cases_engine_generates_the_same_tokens_on_both_paths(self, tiny_model_path, run_to_end, monkeypatch,
                                                                   tmp_path):
        """The tiny model served with two adapters of different ranks beside the base model, a prompt longer than
        a sliced run among them: the kernels generate what the gathered bmm generates, token for token (fp32), and
        the adapters change what the base model says."""
        import dataclasses

        from floodway.engine.bench.lora import write_adapter
        from floodway.engine.config import EngineConfig
        from floodway.engine.kernels.lora_matmul import Segments
        from floodway.engine.llm_engine import LLMEngine
        from floodway.engine.sampling_params import SamplingParams

        bmm = batch.to_device

        def on_bmm(p, device, scale):  # the CPU's layout, wherever the engine runs
            d = bmm(p, "cpu", scale.cpu())
            return dataclasses.replace(d, **{f: getattr(d, f).to(device) for f in ("rows", "gather", "dest")
                                             if getattr(d, f) is not None})

        def on_kernels(p, device, scale):
            return batch.DeviceBatch([], None, None, None, 0, 0, Segments.of(p, device))

        def generate(to_device):
            monkeypatch.setattr(batch, "to_device", to_device)
            eng = LLMEngine(EngineConfig(model=tiny_model_path, device=DEVICE, dtype="float32", max_model_len=64,
                                         num_kv_blocks=16, max_num_seqs=4, enable_lora=True, max_loras=2,
                                         max_lora_rank=8, enable_prefix_caching=False))
            geometry = eng.lora.slots.geometry
            for name, rank in (("a", 8), ("b", 3)):
                if not (tmp_path / name).exists():
                    write_adapter(tmp_path / name, geometry, rank, seed=rank)
                eng.lora.load(name, str(tmp_path / name))
            params = SamplingParams(max_tokens=2, ignore_eos=True, temperature=0)
            long = list(range(10, 30))  # 20 rows of one slot: a sliced run on the bmm path
            for rid, prompt, lora in (("base", long, None), ("a", long, "a"), ("b", [5, 6, 7], "b"),
                                      ("a-short", [5, 6, 7], "a")):
                eng.add_request(rid, prompt, params, lora=lora)
            return {rid: outs[-1].output_token_ids for rid, outs in run_to_end(eng).items()}

        got = generate(on_kernels)
        assert got == generate(on_bmm)
        assert got["a"] != got["base"]


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU: the Triton kernels serve LoRA rows only there")
def test_cuda_step_batch_selects_the_kernel_and_equals_the_cpu_path():
    """On a CUDA device the runner's step batch carries the kernels' segments, and the layer's output equals the CPU
    path's gathered bmm on the same weights."""
    from floodway.engine.kernels.lora_matmul import Segments

    slots = [1, -1] + [0] * 37 + [2, 2, -1, 1]
    p = batch.plan(slots)
    lin, _, _ = _layer([8, 2, 5], torch.float32, "cuda")
    assert isinstance(batch.to_device(p, "cuda", lin.scale).kernel, Segments)
    x = torch.randn(len(slots), 100, device="cuda")
    lin.step.batch = batch.to_device(p, "cuda", lin.scale)
    got = lin(x)
    cpu, _, _ = _layer([8, 2, 5], torch.float32, "cpu")
    cpu.base.load_state_dict(lin.base.state_dict())
    cpu.step.batch = batch.to_device(p, "cpu", cpu.scale)
    torch.testing.assert_close(got.cpu(), cpu(x.cpu()), atol=1e-5, rtol=1e-5)
