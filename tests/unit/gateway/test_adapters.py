"""The gateway's adapter rules: the overflow API's model per local model, and adapter holders for affinity."""

import random

from floodway.operator.gateway.adapters import AdapterIndex, adapter_hits, overflow_model
from floodway.operator.gateway.routing import BackendLoad, PrefixPolicy, RoutingWeights, pick_prefix


def test_overflow_model_maps_names_and_never_sends_an_unmapped_adapter():
    mapping = {"support-bot": "gpt-small-ft", "base": "gpt-small"}
    assert overflow_model("support-bot", "base", mapping, None) == "gpt-small-ft"
    assert overflow_model(None, "base", mapping, "other") == "gpt-small"  # the mapping wins over overflow.model
    assert overflow_model("legal-bot", "base", mapping, "gpt-small") is None  # an adapter the API never heard of
    assert overflow_model("base", "base", {}, "gpt-small") == "gpt-small"
    assert overflow_model(None, "base", {}, None) == "base"


def test_adapter_hits_only_for_adapters():
    holders = {"e1": {"a", "b"}, "e2": {"b"}, "e3": set()}
    assert adapter_hits("b", "base", holders) == {"e1": 1.0, "e2": 1.0}
    assert adapter_hits("a", "base", holders) == {"e1": 1.0}
    assert adapter_hits("base", "base", holders) == {} and adapter_hits(None, "base", holders) == {}


def test_index_forgets_the_least_recently_sent_beyond_the_slots():
    idx = AdapterIndex(slots=2)
    for a in ("x", "y", "x", "z"):
        idx.sent("e1", a)
    idx.listed("e2", {"x"})
    idx.listed("e3", {"x", "y", "z"})  # more than its slots: which are resident is unknown
    assert idx.holders() == {"e1": {"x", "z"}, "e2": {"x"}, "e3": frozenset()}
    idx.forget("e1")
    assert "e1" not in idx.holders()


def test_affinity_picks_the_holder_within_the_load_cap():
    loads = [BackendLoad("e1", True, recent_work=10.0), BackendLoad("e2", True, recent_work=10.0),
             BackendLoad("e3", True, recent_work=10.0)]
    hits = adapter_hits("a", "base", {"e2": {"a"}})
    w, p = RoutingWeights(), PrefixPolicy()
    assert {pick_prefix(loads, hits, random.Random(s), w, p).id for s in range(20)} == {"e2"}
    busy = [loads[0], BackendLoad("e2", True, recent_work=100.0), loads[2]]  # past the cap: load decides
    assert "e2" not in {pick_prefix(busy, hits, random.Random(s), w, p).id for s in range(20)}


def test_an_unmapped_model_is_served_locally_or_held_never_overflowed():
    from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision

    policy = OverflowPolicy(enabled=True, hold_queue_size=2, hold_timeout_s=10.0)
    unmapped = RequestInfo(100, arrived_at=0.0, unmapped_model=True)
    mapped = RequestInfo(100, arrived_at=0.0)
    queued = PoolState(ready=1, waiting=10.0)  # past max_waiting_per_replica: the queue-depth trigger fires
    assert overflow_decision(queued, policy, mapped, 0.0).target == "overflow"
    assert (overflow_decision(queued, policy, unmapped, 0.0).target,
            overflow_decision(queued, policy, unmapped, 0.0).reason) == ("local", "model_not_mapped")
    none_ready = PoolState(ready=0)
    assert overflow_decision(none_ready, policy, unmapped, 0.0).target == "hold"
    full = overflow_decision(PoolState(ready=0, held=2), policy, unmapped, 0.0)
    assert (full.target, full.reason, full.retry_after_s) == ("reject", "hold_queue_full:model_not_mapped", 1.0)
