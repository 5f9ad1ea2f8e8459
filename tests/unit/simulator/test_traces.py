"""Trace loaders (the real files vendored in data/traces) and synthetic generators."""

import gzip
import hashlib
import re

import pytest
from floodway.operator.simulator.traces import (
    compress,
    idle_then_burst,
    load_trace,
    on_off,
    rate_stats,
    resolve_trace,
    spread_ticks,
    steps,
    trace_from_spec,
    traces_dir,
)


@pytest.mark.parametrize("name", ["azure-conv", "mooncake"])
def test_vendored_traces_decompress_to_the_documented_originals(name, monkeypatch):
    monkeypatch.delenv("FLOODWAY_TRACES_DIR", raising=False)
    path = resolve_trace(name)
    assert path.suffix == ".gz" and path.parent.parent == traces_dir()
    readme = (path.parent / "README.md").read_text()
    size, digest = re.search(r"byte-identical: ([\d,]+) bytes, sha256 `([0-9a-f]{64})`", readme).groups()
    data = gzip.decompress(path.read_bytes())
    assert len(data) == int(size.replace(",", "")) and hashlib.sha256(data).hexdigest() == digest


def test_azure_conversation_trace():
    tr = load_trace(resolve_trace("azure-conv"))
    assert len(tr) == 19366
    assert tr[0].arrival_s == 0 and 3501 < tr[-1].arrival_s < 3502
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(tr, tr[1:], strict=False))
    assert (tr[0].prompt_tokens, tr[0].output_tokens) == (374, 44)


def test_mooncake_trace_in_seconds():
    tr = load_trace(resolve_trace("mooncake"))
    assert len(tr) == 12031
    assert tr[-1].arrival_s == pytest.approx(3536.999)
    assert (tr[0].prompt_tokens, tr[0].output_tokens) == (6758, 500)
    spread = spread_ticks(tr, 3.0, seed=1)
    assert len({r.arrival_s for r in spread}) == len(spread)


def test_bad_files_are_clear_errors(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n")
    with pytest.raises(ValueError, match="missing CSV columns"):
        load_trace(bad)
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n")
    with pytest.raises(ValueError, match=r"t.csv:2: bad row"):
        load_trace(bad)
    js = tmp_path / "t.jsonl"
    js.write_text('{"timestamp": 0, "input_length": 5}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:1: bad record"):
        load_trace(js)
    with pytest.raises(FileNotFoundError):
        resolve_trace(str(tmp_path / "nope.csv"))
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(tmp_path / "t.txt")


def test_idle_then_burst_rates():
    tr = idle_then_burst(base_rate=0.5, burst_rate=20, duration_s=3600, burst_at_s=600, burst_len_s=120, bursts=1)
    in_burst = sum(1 for r in tr if 600 <= r.arrival_s < 720)
    before = sum(1 for r in tr if r.arrival_s < 600)
    assert 2000 < in_burst < 2800 and 220 < before < 380
    mean, peak = rate_stats(tr)
    assert peak >= 10 * mean


def test_generators_are_deterministic_per_seed():
    assert steps([1, 5], step_s=60, seed=3) == steps([1, 5], step_s=60, seed=3)
    assert steps([1, 5], step_s=60, seed=3) != steps([1, 5], step_s=60, seed=4)
    tr = on_off(on_rate=10, on_s=30, off_s=30, duration_s=120)
    assert all((r.arrival_s % 60) < 30 for r in tr)


def test_compress_and_specs():
    tr = steps([2.0], step_s=100)
    fast = compress(tr, 4)
    assert fast[-1].arrival_s == pytest.approx(tr[-1].arrival_s / 4)
    with pytest.raises(ValueError):
        compress(tr, 0)
    burst = trace_from_spec("idle-burst:burst_rate=30,bursts=1,duration_s=900", seed=2)
    assert burst == idle_then_burst(burst_rate=30, bursts=1, duration_s=900, seed=2)
    assert trace_from_spec("steps:rates=1/3,step_s=50") == steps([1, 3], step_s=50)
    with pytest.raises(ValueError, match="bad parameter"):
        trace_from_spec("idle-burst:colour=3")
    with pytest.raises(ValueError, match="needs a number"):
        trace_from_spec("on-off:on_rate=fast")


def test_spiky_traffic_is_prefill_heavy_and_bursty_like_the_held_out_trace():
    from floodway.operator.simulator.traces import burstiness, spiky

    for seed in range(3):
        tr = spiky(seed=seed)
        prompts = sorted(r.prompt_tokens for r in tr)
        outputs = sorted(r.output_tokens for r in tr)
        assert 1800 <= sum(prompts) / len(tr) <= 2300 and 1300 <= prompts[len(tr) // 2] <= 1650
        assert 10 <= outputs[len(tr) // 2] <= 16 and 20 <= sum(outputs) / len(tr) <= 36
        assert 15 <= burstiness(tr) <= 35
        assert 1.5 <= len(tr) / tr[-1].arrival_s <= 4.0


def test_long_context_prompts_follow_their_log_normal_with_a_tail_past_100k():
    """Against the log-normal's own quantiles (statistics.NormalDist): median 12k, p90 12k x e^(1.2816 x 0.9),
    the share past 100k 1 - Phi(ln(100k / 12k) / 0.9), about 0.9%; answers a few hundred tokens."""
    import math
    from statistics import NormalDist

    from floodway.operator.simulator.traces import long_context

    z = NormalDist()
    for seed in range(3):
        tr = long_context(seed=seed)
        assert tr == long_context(seed=seed) and tr != long_context(seed=seed + 1)
        prompts = sorted(r.prompt_tokens for r in tr)
        outputs = sorted(r.output_tokens for r in tr)
        n = len(tr)
        assert prompts[n // 2] == pytest.approx(12_000, rel=0.06)
        assert prompts[int(0.9 * n)] == pytest.approx(12_000 * math.exp(z.inv_cdf(0.9) * 0.9), rel=0.1)
        tail = sum(p > 100_000 for p in prompts) / n
        assert 0.4 * (1 - z.cdf(math.log(100_000 / 12_000) / 0.9)) < tail < 1.8 * (1 - z.cdf(math.log(100 / 12) / 0.9))
        assert prompts[-1] <= 200_000  # the context window
        assert 150 <= outputs[n // 2] <= 250 and 150 <= sum(outputs) / n <= 400
        # 1 -> 4 -> 1 req/s along a cosine: a mean of 2.5 req/s over whole periods
        assert len(tr) / 1800 == pytest.approx(2.5, rel=0.06)
