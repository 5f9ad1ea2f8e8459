"""The simulator's prefix caching (replica.py) and prefix-aware routing (gateway.py, the gateway's pick_prefix)."""

from floodway.operator.autoscaler.baselines import StaticPolicy, decide_static
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, simulate
from floodway.operator.simulator.replica import Replica, ReplicaProfile, SimRequest
from floodway.operator.simulator.report import summarize
from floodway.operator.simulator.traces import BLOCK_TOKENS, load_trace, resolve_trace, spread_ticks


def test_a_replica_skips_the_prefill_of_cached_leading_blocks_and_evicts_lru():
    rep = Replica(ReplicaProfile(kv_capacity_tokens=3 * BLOCK_TOKENS), 0.0, lambda r: None, prefix_cache=True)
    first = SimRequest(0.0, 2 * BLOCK_TOKENS, 1, (1, 2))
    rep.submit(first, 0.0)
    assert first.left == 2 * BLOCK_TOKENS
    second = SimRequest(0.0, 2 * BLOCK_TOKENS + 10, 1, (1, 2, 3))
    rep.submit(second, 0.0)
    assert second.left == 10 and (rep.prefix_hits, rep.prefix_queries) == (2 * BLOCK_TOKENS, 4 * BLOCK_TOKENS + 10)
    same = SimRequest(0.0, 2 * BLOCK_TOKENS, 1, (1, 2))
    rep.submit(same, 0.0)
    assert same.left == 1  # never the last token
    rep.submit(SimRequest(0.0, BLOCK_TOKENS, 1, (9,)), 0.0)  # 4 blocks > 3: the least recent (3) goes
    assert rep.cached_blocks((1, 2, 3)) == 2 and rep.cached_blocks((9,)) == 1


def test_prefix_routing_raises_hits_and_cuts_ttft_on_the_mooncake_trace():
    trace = spread_ticks(load_trace(resolve_trace("mooncake")), 3.0)[:1500]
    profile = ReplicaProfile(kv_capacity_tokens=1_000_000)
    out = {}
    for mode in ("load", "prefix"):
        res = simulate(trace, Scaler("static-4", decide_static, StaticPolicy(4), 4), SimConfig(profile, prefix=mode))
        assert len(res.prefix) == 4 and all(q for _, q in res.prefix)
        out[mode] = (sum(h for h, _ in res.prefix) / sum(q for _, q in res.prefix), summarize(res))
    (load_hit, load), (prefix_hit, prefix) = out["load"], out["prefix"]
    assert prefix_hit > 1.3 * load_hit
    assert prefix.ttft_p50 < load.ttft_p50 and prefix.rejected == load.rejected == 0
    no_cache = summarize(simulate(trace, Scaler("static-4", decide_static, StaticPolicy(4), 4), SimConfig(profile)))
    assert load.ttft_p50 < no_cache.ttft_p50  # even load-only routing gets some hits
