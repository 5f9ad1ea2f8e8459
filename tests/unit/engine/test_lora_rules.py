"""LoRA's pure rules: the step's row plan, slot assignment and admission, the settings, PEFT config checks and the
delta's scale, the slot layout, the prefix cache keyed by adapter, and the scheduler's adapter cap."""

import json

import pytest
import torch
from floodway.engine.block_pool import BlockPool
from floodway.engine.config import EngineConfig
from floodway.engine.kernels import cpu
from floodway.engine.kv_manager import KVManager
from floodway.engine.lora import batch, config, peft_format, residency
from floodway.engine.lora.registry import Adapter, CpuCache, DuplicateAdapter, Registry, UnknownAdapter
from floodway.engine.outputs import RequestMetrics
from floodway.engine.request import Request
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import Scheduler


@pytest.fixture
def torch_lora(monkeypatch):
    """torch's LoRA calls (sliced runs, padded bmm) on CPU, as where our kernel is not available."""
    monkeypatch.setattr(batch, "CPU_KERNEL", False)


@pytest.fixture(params=["ours", "torch"] if cpu.available() else ["torch"])
def lora_kernel(request, monkeypatch):
    monkeypatch.setattr(batch, "CPU_KERNEL", request.param == "ours")
    return request.param


def test_plan_slices_long_runs_and_pads_the_rest_by_slot(torch_lora):
    # rows: 3 decodes (slots 1, -1, 1), then a 20-row prefill of slot 0, then a 2-row chunk of slot 2: the three
    # short runs would read no fewer slots sliced (3) than padded (slots 0..2)
    slots = [1, -1, 1] + [0] * 20 + [2, 2]
    p = batch.plan(slots, run_rows=16)
    assert p.runs == [(0, 3, 23)]
    assert p.rows == [0, 2, 23, 24]  # by slot, then row order; the base row is in neither
    assert (p.num_slots, p.per_slot) == (3, 2)
    assert p.dest == [2, 3, 4, 5]  # slot s, j-th row -> s * M + j
    assert batch.plan([-1, -1]) is None
    d = batch.to_device(p, "cpu", torch.ones(3, 1, 1))
    assert d.gather.tolist() == [0, 0, 0, 2, 23, 24] and d.rows.tolist() == p.rows


def test_plan_slices_every_run_when_they_are_few_against_the_slots_the_padded_bmm_would_read(torch_lora):
    # decodes of slots 5 and 9 (of 16 resident): two slices read two adapters, the padded bmm would read ten
    p = batch.plan([9, -1, 5, 5], run_rows=16)
    assert batch.plan([2, -1, 0, 1], run_rows=16).runs == []  # three slices cost more than three slots: padded
    assert p.runs == [(9, 0, 1), (5, 2, 4)] and p.rows == [] and p.num_slots == 0
    d = batch.to_device(p, "cpu", torch.arange(16.0).view(16, 1, 1))
    assert d.rows is None and d.scales[9] == 9.0
    # one of them as its own slice (longer than run_rows) leaves one short run of slot 5: sliced too
    assert batch.plan([9] * 20 + [5], run_rows=16).runs == [(9, 0, 20), (5, 20, 21)]


@pytest.mark.parametrize("base_dtype", [torch.float32, torch.bfloat16])  # bf16: a bf16 model's
@pytest.mark.parametrize("slots", [[2, -1, 0, 0, 2] + [1] * 5 + [-1],  # padded bmm beside a sliced run
                                   [2, -1, 2, 2],  # every run sliced
                                   [2, -1] + [0] * 11 + [1, -1]])  # a run longer than our kernel's 4-row block
# (in, rank, part outputs). Our kernel reads A in one stream where W = parts x rank is at most 64, in 64-lane panels
# past that, passes of 16 or 32 lanes split over rows; B in 64-column panels with tails: tiny ranks and tails, odd
# inputs and ranks (a bf16 pair padded with a zero); rank 48 (W 48; W 144 in panels); rank 16 on one, two and three
# parts; rank 32 on two.
@pytest.mark.parametrize("geometry", [(8, 2, (6,)), (8, 2, (3, 2, 1)), (35, 3, (20, 12)), (192, 48, (144,)),
                                      (192, 48, (72, 48, 24)), (64, 16, (100,)), (64, 16, (96, 80)),
                                      (64, 16, (64, 16, 16)), (36, 32, (40, 24))])
def test_plan_rows_compute_each_rows_own_delta(slots, geometry, base_dtype, lora_kernel):
    """Our CPU kernel, and torch's padded bmm over slots and sliced runs, equal a per-row loop, whatever the mix (an
    oracle by definition), B laid out block-diagonal by part as peft_format places it (and packed by the layer where
    our kernel serves), the adapters in the dtype layers.adapter_dtype gives them (bf16 beside a bf16 model for our
    kernel, float32 for torch's path). Beside a bf16 base the deltas sum in float32 and the output is the bf16 base
    output plus that sum, rounded once; bf16 adapters round x A to bf16 first."""
    from floodway.engine.lora.layers import LoRALinear, StepState, adapter_dtype

    torch.manual_seed(0)
    n_in, rank, outs = geometry
    base = torch.nn.Linear(n_in, sum(outs)).to(base_dtype)
    step = StepState()
    scale = torch.tensor([0.5, 2.0, 3.0]).view(3, 1, 1)
    lin = LoRALinear(base, step, 3, n_in, rank, outs, scale, "cpu", adapter_dtype("cpu", base_dtype))
    assert lin.lora_a.dtype == (torch.bfloat16 if lora_kernel == "ours" and base_dtype == torch.bfloat16
                                else torch.float32)
    a = torch.randn(3, n_in, len(outs) * rank).to(lin.lora_a.dtype)
    b = torch.zeros(3, len(outs) * rank, sum(outs), dtype=lin.lora_a.dtype)
    for r0, r1, c0, c1 in lin.parts:  # each part's own block, zeros elsewhere
        b[:, r0:r1, c0:c1].normal_()
    for s in range(3):
        lin.load(s, (a[s], b[s]))
    x = torch.randn(len(slots), n_in).to(base_dtype)
    run_rows = batch.run_rows("cpu") if lora_kernel == "ours" else 3
    step.batch = batch.to_device(batch.plan(slots, run_rows), "cpu", scale)
    assert (step.batch.kernel is not None) == (lora_kernel == "ours")
    got = lin(x)
    assert got.dtype == base_dtype
    xf, a, b = x.float(), a.float(), b.float()
    # bf16 adapters: x A rounded to bf16 before B, as a bf16 matmul in torch or peft rounds it
    inner = (lambda t: t.bfloat16().float()) if lin.lora_a.dtype == torch.bfloat16 else (lambda t: t)
    want = torch.stack([(base(x[t]).float() + (0 if s < 0 else inner(xf[t] @ a[s]) @ b[s] * scale[s, 0, 0]))
                        .to(base_dtype) for t, s in enumerate(slots)])
    # float32: summation order, about eps x the terms' magnitudes (|x| |A| |B|: thousands at rank 48, where a delta
    # of about 100 may cancel to near 0; the oracle's own sums differ that much between CPUs); bf16: one bf16
    # rounding apart at most
    terms = max((((xf[t].abs() @ a[s].abs()) @ b[s].abs()) * scale[s, 0, 0]).max().item()
                for t, s in enumerate(slots) if s >= 0)
    tolerance = dict(rtol=1e-5, atol=max(1e-4, 1e-6 * terms)) if base_dtype == torch.float32 else \
        dict(rtol=2 ** -7, atol=1e-3)
    torch.testing.assert_close(got, want, **tolerance)


@pytest.mark.skipif(not cpu.available(), reason="this CPU has no AVX-512 BF16 (or the kernels are not built)")
def test_our_kernel_takes_a_plan_with_padded_rows_too():
    """Where our kernel serves, the layers keep A and B packed for it alone, so a plan made for torch's padded bmm still
    reaches the kernel, each padded row a run of its own, and computes each row's delta."""
    from floodway.engine.lora.layers import LoRALinear, StepState

    torch.manual_seed(0)
    slots = [1, -1, 1, 0, 0, 0]
    lin = LoRALinear(torch.nn.Linear(16, 32), StepState(), 2, 16, 4, (32,), torch.ones(2, 1, 1), "cpu",
                     torch.float32)
    a, b = torch.randn(2, 16, 4), torch.randn(2, 4, 32)
    for s in range(2):
        lin.load(s, (a[s], b[s]))
    p = batch.plan(slots, run_rows=1)
    assert p.rows and p.runs  # the 3-row run sliced, slot 1's decodes padded
    lin.step.batch = batch.to_device(p, "cpu", lin.scale)
    x = torch.randn(len(slots), 16)
    want = torch.stack([lin.base(x[t]) + (0 if s < 0 else x[t] @ a[s] @ b[s]) for t, s in enumerate(slots)])
    torch.testing.assert_close(lin(x), want, rtol=1e-5, atol=1e-5)


def test_assign_prefers_empty_slots_then_least_recently_used_not_needed_now():
    assert residency.assign([None, None, None], [0, 0, 0], [7, 8]) == [(0, 7), (1, 8)]
    # slot 1 (adapter 5) is older than slot 0 (adapter 4); adapter 4 is needed, so slot 1 goes
    assert residency.assign([4, 5, 6], [3, 1, 2], [4, 9]) == [(1, 9)]
    assert residency.assign([4, 5], [1, 2], [4, 5]) == []
    with pytest.raises(ValueError, match="max-loras"):
        residency.assign([4], [0], [5, 6])


def test_residency_loads_once_and_evicts_lru():
    r, loads = residency.Residency(2), []
    where = r.slots_for([1, 2], lambda s, a: loads.append((s, a)))
    assert where == {1: 0, 2: 1} and loads == [(0, 1), (1, 2)]
    r.slots_for([1], lambda s, a: loads.append((s, a)))  # 2 is now the least recently used
    assert r.slots_for([3, 1], lambda s, a: loads.append((s, a))) == {3: 1, 1: 0}
    assert loads[-1] == (1, 3) and r.swaps == 3


def test_admits_caps_distinct_adapters():
    assert residency.admits(None, {1, 2}, 2)  # the base model always fits
    assert residency.admits(1, {1, 2}, 2)
    assert not residency.admits(3, {1, 2}, 2)
    assert residency.admits(3, {1, 2}, None)


def test_settings_rules():
    assert config.parse_modules(["a=/x", "b/c=/y=z"]) == {"a": "/x", "b/c": "/y=z"}
    for bad, msg in ((["a"], "name=path"), (["a=/x", "a=/y"], "twice"), (["=x"], "lora_name"),
                     ([" a=/x"], "lora_name")):
        with pytest.raises(ValueError, match=msg):
            config.parse_modules(bad)
    EngineConfig(enable_lora=True, lora_modules=["a=/x"], max_loras=2, max_cpu_loras=4).validate()
    for kw, msg in ((dict(lora_modules=["a=/x"]), "needs enable_lora"),
                    (dict(enable_lora=True, max_loras=0), "max_loras"),
                    (dict(enable_lora=True, max_loras=4, max_cpu_loras=2), "max_cpu_loras"),
                    (dict(enable_lora=True, max_lora_rank=0), "max_lora_rank"),
                    (dict(enable_lora=True, compile_decode=True), "compile_decode"),
                    (dict(enable_lora=True, model_impl="transformers"), "model_impl"),
                    (dict(enable_lora=True, lora_modules=["floodway/tiny-llama=/x"]), "base model")):
        with pytest.raises(ValueError, match=msg):
            EngineConfig(**kw).validate()


def _folder(tmp_path, **cfg):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **cfg}))
    return str(tmp_path)


def test_read_config_refuses_with_clear_errors(tmp_path):
    with pytest.raises(peft_format.LoRANotFound, match="no adapter folder"):
        peft_format.read_config(str(tmp_path / "missing"), 16)
    with pytest.raises(peft_format.LoRANotFound, match="adapter_config.json"):
        peft_format.read_config(str(tmp_path), 16)
    (tmp_path / "adapter_config.json").write_text("{not json")
    with pytest.raises(peft_format.LoRAError, match="not valid JSON"):
        peft_format.read_config(str(tmp_path), 16)
    for cfg, msg in ((dict(r=32), "rank 32 exceeds .*--max-lora-rank 16"), (dict(r=0), "r must be"),
                     (dict(peft_type="IA3"), "only LORA"), (dict(use_dora=True), "DoRA"),
                     (dict(bias="all"), "bias"), (dict(lora_alpha="x"), "lora_alpha"),
                     (dict(modules_to_save=["lm_head"]), "modules_to_save")):
        with pytest.raises(peft_format.LoRAError, match=msg):
            peft_format.read_config(_folder(tmp_path, **cfg), 16)
    assert peft_format.read_config(_folder(tmp_path), 16)["r"] == 4


def test_scale_is_peft_scaling():
    assert peft_format.scale_of({"r": 8, "lora_alpha": 16}) == 2.0
    assert peft_format.scale_of({"r": 16, "lora_alpha": 8, "use_rslora": True}) == 2.0


def test_place_puts_parts_side_by_side_block_diagonally():
    big_a, big_b = torch.zeros(3, 2 * 4), torch.zeros(2 * 4, 5 + 2)
    a0, b0 = torch.arange(6.).view(2, 3), torch.arange(10.).view(5, 2)  # part 0: r=2, out 5
    a1, b1 = torch.ones(1, 3), torch.full((2, 1), 7.)  # part 1: r=1, out 2
    peft_format.place(big_a, big_b, a0, b0, 0, 0)
    peft_format.place(big_a, big_b, a1, b1, 4, 5)
    x = torch.randn(2, 3)
    merged = x @ big_a @ big_b
    torch.testing.assert_close(merged, torch.cat([x @ a0.t() @ b0.t(), x @ a1.t() @ b1.t()], 1))


def test_load_refuses_a_different_base_model(tmp_path):
    from safetensors.torch import save_file

    geometry = peft_format.Geometry(2, {"qkv": (8, (8, 4, 4)), "o_proj": (8, (8,)), "gate_up": (8, (16, 16)),
                                        "down_proj": (16, (8,))})
    key = "base_model.model.model.layers.{}.self_attn.q_proj.lora_{}.weight"
    folder = _folder(tmp_path)
    for tensors, msg in (({key.format(0, "A"): torch.zeros(4, 10), key.format(0, "B"): torch.zeros(8, 4)},
                          "base-model mismatch at layer 0 q_proj"),
                         ({key.format(5, "A"): torch.zeros(4, 8), key.format(5, "B"): torch.zeros(8, 4)},
                          "layer 5, the served model 2 layers"),
                         ({key.format(0, "A"): torch.zeros(4, 8)}, "not its pair"),
                         ({"base_model.model.lm_head.lora_A.weight": torch.zeros(4, 8)}, "not a LoRA weight")):
        save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
        with pytest.raises(peft_format.LoRAError, match=msg):
            peft_format.load(folder, geometry, 16, torch.float32)
    (tmp_path / "adapter_model.safetensors").unlink()
    with pytest.raises(peft_format.LoRANotFound, match="adapter_model.safetensors"):
        peft_format.load(folder, geometry, 16, torch.float32)


def test_registry_and_cpu_cache():
    reg = Registry()
    a = reg.add("a", "/x")
    with pytest.raises(DuplicateAdapter):
        reg.add("a", "/y")
    assert reg.remove("a") is a
    with pytest.raises(UnknownAdapter):
        reg.remove("a")
    assert reg.add("a", "/x").id != a.id  # reloaded under its name: a new id, no shared KV or weights
    reads = []
    cache = CpuCache(2, lambda path: reads.append(path) or path.upper())
    x, y, z = (Adapter(n, f"/{n}", i) for i, n in enumerate("xyz"))
    assert [cache.get(x), cache.get(y), cache.get(x), cache.get(z)] == ["/X", "/Y", "/X", "/Z"]
    cache.get(y)  # y was the least recently used: evicted by z, read again
    assert reads == ["/x", "/y", "/z", "/y"]


def _req(rid, tokens, lora=None):
    r = Request(rid, list(tokens), SamplingParams(), RequestMetrics(0.0))
    r.lora = lora
    return r


def test_prefix_cache_is_keyed_by_adapter():
    kv = KVManager(16, 4)
    a, b = Adapter("a", "/a", 1), Adapter("b", "/b", 2)
    first = _req("1", range(9), a)
    assert kv.allocate(first, 9)
    first.num_computed_tokens = 9
    kv.cache_filled_blocks(first)
    assert len(kv.computed_prefix(_req("2", range(9), a))[0]) == 2
    assert kv.computed_prefix(_req("3", range(9), b)) == ([], [])
    assert kv.computed_prefix(_req("4", range(9))) == ([], [])


def test_block_lookup_verifies_extra_keys_not_only_the_hash():
    pool = BlockPool(4)
    h = pool.register(0, None, (1, 2), ("lora", 1))
    pool.cached[hash((None, (1, 2), ()))] = 0  # a forged collision: the base model's key pointing at that block
    assert pool.lookup(None, (1, 2), ("lora", 1)) == (0, h)
    assert pool.lookup(None, (1, 2), ()) is None


def test_scheduler_runs_at_most_max_loras_adapters_and_lets_others_pass():
    sched = Scheduler(KVManager(64, 4), max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True, max_loras=2)
    a, b, c = (Adapter(n, f"/{n}", i) for i, n in enumerate("abc", 1))
    reqs = [_req("1", range(3), a), _req("2", range(3), b), _req("3", range(3), c), _req("4", range(3)),
            _req("5", range(3), a)]
    for r in reqs:
        sched.add(r)
    out = sched.schedule()
    assert [s.req.request_id for s in out.seqs] == ["1", "2", "4", "5"]  # c waits for a free slot, in its place
    assert [r.request_id for r in sched.waiting] == ["3"]
