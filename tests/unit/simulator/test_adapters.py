"""LoRA adapters in the simulator: adapter-tagged traces, the gateway's overflow rule per model (an adapter without
an overflow.models entry never overflows) and adapter affinity, through the gateway's own functions."""

from collections import Counter
from dataclasses import replace

import pytest
from floodway.operator.autoscaler.baselines import StaticPolicy, decide_static
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, simulate
from floodway.operator.simulator.gateway import SimGateway
from floodway.operator.simulator.replica import Replica, ReplicaProfile, SimRequest
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.slot import ReplicaSlot
from floodway.operator.simulator.traces import (
    TraceRequest,
    adapter_shares,
    idle_then_burst,
    parse_pairs,
    tag_adapters,
)

SMALL = ReplicaProfile(max_num_seqs=16)


def test_tagging_names_adapters_in_their_shares_with_blocks_of_their_own():
    trace = [TraceRequest(float(i), 100, 10, (1, 2, 3)) for i in range(4000)]
    tagged = tag_adapters(trace, {"support": 0.3, "legal": 0.1}, seed=1)
    counts = Counter(r.adapter for r in tagged)
    assert abs(counts["support"] / 4000 - 0.3) < 0.03 and abs(counts["legal"] / 4000 - 0.1) < 0.03
    assert abs(counts[None] / 4000 - 0.6) < 0.03
    assert tagged == tag_adapters(trace, {"support": 0.3, "legal": 0.1}, seed=1)
    blocks = {r.adapter: r.blocks for r in tagged}
    assert blocks[None] == (1, 2, 3) and len({blocks[None], blocks["support"], blocks["legal"]}) == 3
    assert [r.arrival_s for r in tagged] == [r.arrival_s for r in trace]


def test_bad_adapter_options_are_clear_errors():
    assert adapter_shares("a=0.5,b=0.5") == {"a": 0.5, "b": 0.5}
    for text in ("a", "a=x", "a=0", "a=0.7,b=0.4", "a=0.1,a=0.2", ""):
        with pytest.raises(ValueError, match="adapters"):
            adapter_shares(text)
    assert parse_pairs("a=x,b=y", "overflow models") == {"a": "x", "b": "y"}
    with pytest.raises(ValueError, match="overflow models"):
        parse_pairs("a", "overflow models")


def test_the_options_tag_the_trace_and_map_the_models():
    trace, cfg, *_ = prepare(Options(trace="steps:rates=2,step_s=100", adapters="a=0.5", overflow_models="a=api-a",
                                     max_loras=2))
    assert {r.adapter for r in trace} == {"a", None}
    assert cfg.overflow_models == {"a": "api-a"} and cfg.max_loras == 2


def test_in_simulation_an_unmapped_adapter_never_overflows_and_a_mapped_one_may():
    burst = idle_then_burst(base_rate=1, burst_rate=40, duration_s=300, burst_at_s=100, burst_len_s=60, bursts=1)
    trace = tag_adapters(burst, {"mapped": 0.3, "unmapped": 0.3}, seed=2)
    cfg = SimConfig(profile=SMALL, overflow=OverflowPolicy(enabled=True, max_waiting_per_replica=2),
                    overflow_models={"mapped": "api-model"})
    res = simulate(trace, Scaler("static-1", decide_static, StaticPolicy(1), 1), cfg)
    where = Counter((r.adapter, r.where) for r in res.requests)
    assert where["unmapped", "overflow"] == 0 and where["unmapped", "local"] > 0
    assert where["mapped", "overflow"] > 0 and where[None, "overflow"] > 0
    # With none ready, the unmapped adapter's requests wait in the hold queue and are refused, never overflowed.
    none = simulate(trace, Scaler("static-0", decide_static, StaticPolicy(0), 0), replace(
        cfg, overflow=OverflowPolicy(enabled=True, hold_timeout_s=5.0)))
    gone = Counter((r.adapter, r.where) for r in none.requests)
    assert gone["unmapped", "rejected"] == sum(r.adapter == "unmapped" for r in trace)
    assert gone["mapped", "overflow"] == sum(r.adapter == "mapped" for r in trace)


def _served_by(prefix: str | None) -> dict[str, set[str]]:
    """Which replica each adapter's requests went to: two replicas, one slot each, two requests for a then two for
    b, in turn, one every 5 s (light load: each finished before the next)."""
    gateway = SimGateway(SimConfig(profile=SMALL, prefix=prefix, max_loras=1))
    slots = [ReplicaSlot(0.0, name=str(i), replica=Replica(SMALL, 0.0, lambda r: None)) for i in range(2)]
    served: dict[str, set[str]] = {"a": set(), "b": set()}
    for k in range(40):
        t, adapter = 5.0 * k, "aabb"[k % 4]
        before = [s.prompt_tokens for s in slots]
        for s in slots:
            s.replica.advance_to(t)
        gateway.arrive(slots, SimRequest(t, 200, 4, adapter=adapter), t)
        served[adapter] |= {s.name for s, n in zip(slots, before, strict=True) if s.prompt_tokens != n}
    return served


def test_in_simulation_an_adapter_stays_on_the_replica_holding_it():
    held = _served_by(None)
    assert len(held["a"]) == len(held["b"]) == 1 and held["a"] != held["b"]
    by_load = _served_by("load")  # on load alone: each adapter on both replicas, which swap their slots
    assert len(by_load["a"]) == len(by_load["b"]) == 2
