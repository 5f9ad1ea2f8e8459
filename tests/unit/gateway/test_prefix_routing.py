"""The prefix-aware score and its load cap (routing.pick_prefix), the prefix index (LRU at the engines' KV
capacity, backends coming and going) and the request keys."""

import random
from dataclasses import replace

import pytest
from floodway.operator.gateway.backends import BackendTable, parse_engine_load
from floodway.operator.gateway.prefix_index import BLOCK_CHARS, MAX_KEYS, PrefixIndex, request_keys
from floodway.operator.gateway.routing import (
    BackendLoad,
    PrefixPolicy,
    RoutingWeights,
    decayed,
    pick,
    pick_prefix,
    prefix_gains,
    sent_work,
    uncached_tokens,
    within_cap,
)

W = RoutingWeights()
P = PrefixPolicy(prefix_weight=4.0, prefix_load_cap=1.25, prefix_load_slack=1.0, prefix_min_gain=0.0)


def pool(*loads: int) -> list[BackendLoad]:
    """Backends with `n` requests in flight each, and as many sent lately (their recent work)."""
    return [BackendLoad(str(i), True, in_flight=n, recent_work=n) for i, n in enumerate(loads)]


def test_the_holder_wins_over_a_less_loaded_backend_within_the_cap():
    backends = pool(2, 2, 1, 1)  # mean after: 7/4; the holder's 3 <= 1.25 * 1.75 + 1
    assert pick_prefix(backends, {"0": 1.0}, random.Random(0), W, P).id == "0"
    assert pick_prefix(backends, {"0": 0.1}, random.Random(0), W, P).id != "0"  # a small hit loses to load
    assert pick_prefix(backends, {"0": 1.0, "2": 1.0}, random.Random(0), W, P).id == "2"  # holders: the less loaded


def test_a_hot_prefix_does_not_pile_onto_its_holder():
    """Every request of one prefix (a long conversation's turns, one at a time: nothing stays in flight): the
    holder takes them only up to the cap on recent work, then the others share the rest. Work, not requests: the
    holder's turns cost it 1 each (all cached), elsewhere 2 (a prompt of 512 uncached tokens), so it serves more
    requests than the mean but no more work than cap x mean + slack."""
    backends, served = pool(0, 0, 0, 0), dict.fromkeys("0123", 0)
    for _ in range(40):
        hits = {b.id: 1.0 for b in backends if b.id == "0"}
        chosen = pick_prefix(backends, hits, random.Random(0), W, P, prompt_tokens=512)
        served[chosen.id] += 1
        backends = [replace(b, recent_work=b.recent_work + sent_work(0 if b.id == "0" else 512, W))
                    if b.id == chosen.id else b for b in backends]
    assert served["0"] > max(served["1"], served["2"], served["3"])  # affinity did act
    work = [b.recent_work for b in backends]
    assert max(work) == work[0] <= P.prefix_load_cap * sum(work) / len(work) + P.prefix_load_slack


def test_a_prefix_every_backend_holds_is_no_reason_and_ties_are_drawn():
    """A system prompt all engines cached routes on load alone (not always to the first of the least loaded);
    holders of more than the rest tie at random."""
    backends = pool(3, 0, 0, 1)
    everywhere = {b.id: 0.1 for b in backends}
    assert prefix_gains(backends, everywhere, P) == {b.id: 0.0 for b in backends}
    for seed in range(20):
        assert pick_prefix(backends, everywhere, random.Random(seed), W, P) == pick(backends, random.Random(seed), W)
    chosen = {pick_prefix(pool(0, 0, 0), {"0": 0.2, "1": 0.8, "2": 0.8}, random.Random(seed), W, P).id
              for seed in range(20)}
    assert chosen == {"1", "2"}  # the two holders of more, either, never the one holding only what all hold


def test_a_small_gain_is_no_reason_so_an_engine_without_a_short_shared_prefix_still_gets_traffic():
    """Three idle engines hold a system prompt of a twentieth of the prompt, the fourth never got it: below
    min_gain it routes on load (all idle: any of the four), else the fourth would never learn it."""
    idle = pool(0, 0, 0, 0)
    short = {"0": 0.05, "1": 0.05, "2": 0.05}
    shipped = PrefixPolicy()
    assert prefix_gains(idle, short, shipped) == {b.id: 0.0 for b in idle}
    assert {pick_prefix(idle, short, random.Random(seed), W, shipped).id for seed in range(40)} == {"0", "1", "2", "3"}
    assert prefix_gains(idle, {"0": 0.1}, shipped)["0"] == pytest.approx(0.1)
    assert pick_prefix(idle, {"0": 0.1}, random.Random(0), W, shipped).id == "0"


def test_the_shipped_cap_is_1_3_x_the_mean_recent_work_plus_1():
    """The offline replay (test_prefix_replay.py) chose it; a request's work is 1 plus its uncached prompt tokens
    in units of prefill_unit_tokens."""
    shipped = PrefixPolicy()
    assert within_cap(pool(6, 4, 4, 4)[0], pool(6, 4, 4, 4), shipped)  # 7 <= 1.3 * 19/4 + 1
    assert not within_cap(pool(6, 4, 4, 4)[0], pool(6, 4, 4, 4), P)  # 7 > 1.25 * 19/4 + 1
    assert not within_cap(pool(6, 4, 4, 4)[0], pool(6, 4, 4, 4), shipped, work=3.0)  # 9 > 1.3 * 21/4 + 1
    assert not within_cap(pool(8, 4, 4, 4)[0], pool(8, 4, 4, 4), shipped)  # 9 > 1.3 * 21/4 + 1
    assert sent_work(0, W) == 1.0 and sent_work(1024, W) == 3.0 and sent_work(1024, RoutingWeights(
        prefill_unit_tokens=0.0)) == 1.0


def test_cap_always_admits_the_least_loaded():
    backends = pool(5, 5, 5)
    assert all(within_cap(b, backends, PrefixPolicy(prefix_load_cap=1.0, prefix_load_slack=0.0)) for b in backends)
    assert not within_cap(pool(9, 0, 0)[0], pool(9, 0, 0), P)


def test_no_holder_is_the_load_only_pick():
    backends = pool(3, 0, 5, 1)
    for seed in range(20):
        assert pick_prefix(backends, {}, random.Random(seed), W, P) == pick(backends, random.Random(seed), W)
    assert pick_prefix(backends, {"0": 1.0}, random.Random(0), W, P, exclude=frozenset("0123")) is None


def test_index_is_an_lru_capped_at_capacity_and_matches_leading_keys_only():
    index = PrefixIndex()
    index.set_capacity("a", 4)
    index.record("a", [1, 2, 3])
    assert index.matched("a", [1, 2, 9, 3]) == 2 and index.matched("a", [9, 1]) == 0  # stops at a miss
    index.record("a", [7, 8])  # 5 keys > 4: the least recent goes, the tail of [1, 2, 3] (touched first)
    assert index.size("a") == 4 and index.matched("a", [1, 2, 3]) == 2
    index.set_capacity("a", 1)
    assert index.size("a") == 1 and index.matched("a", [7]) == 1  # a request's leading block outlives its tail


def test_backends_start_empty_and_lose_their_entries_when_they_leave_or_turn_unready():
    table = BackendTable(W, random.Random(0), prefix=P)
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    for b in table.backends.values():
        b.ready = True
    keys = request_keys({"prompt": "x" * BLOCK_CHARS * 3})
    first = table.pick(frozenset(), keys)
    assert table.index.matched(first.id, keys) == 3
    assert table.pick(frozenset(), keys).id == first.id  # within the cap: 2 <= 1.25 * 2/2 + 1
    other = ({"a", "b"} - {first.id}).pop()
    table.mark_unready(first.id)
    assert table.index.size(first.id) == 0
    table.backends[first.id].ready = True
    table.set_endpoints([(other, f"http://{other}"), ("c", "http://c")])
    table.backends["c"].ready = True
    assert table.index.size("c") == 0 and first.id not in table.backends
    assert table.pick(frozenset(), keys).id in {other, "c"}


def test_capacity_comes_from_cache_config_info():
    text = ('vllm:cache_config_info{block_size="16",max_num_seqs="8",model_name="m",num_gpu_blocks="64"} 1.0\n')
    assert parse_engine_load(text)["kv_tokens"] == 1024


def test_request_keys_follow_shared_leading_text():
    system = {"role": "system", "content": "s" * 100}
    turn1 = {"messages": [system, {"role": "user", "content": "hello " * 30}]}
    turn2 = {"messages": [*turn1["messages"], {"role": "assistant", "content": "hi " * 30},
                          {"role": "user", "content": "more " * 30}]}
    k1, k2 = request_keys(turn1), request_keys(turn2)
    assert len(k1) >= 3 and k2[:len(k1)] == k1 and len(k2) > len(k1)
    parts = {"messages": [system, {"role": "user", "content": [{"type": "text", "text": "hello " * 30}]}]}
    assert request_keys(parts) == k1
    assert request_keys({"prompt": "z" * (BLOCK_CHARS - 1)}) == []
    assert request_keys({"prompt": list(range(40))}) == request_keys({"prompt": list(range(32)) + [0]})
    assert request_keys({"prompt": ["a" * 500, "b"]}) == []
    assert len(request_keys({"prompt": "y" * 2**22})) == len(request_keys({"prompt": [5] * 2**21})) == MAX_KEYS
    assert len(request_keys({"messages": [{"role": "user", "content": "y" * 99}] * 10**5})) == MAX_KEYS
    other = request_keys({"messages": [{"role": "user", "content": "s" * 100}, turn1["messages"][1]]})
    assert other[0] != k1[0]  # the role is part of the text


def test_prefill_work_in_flight_counts_so_a_first_turn_avoids_the_engine_busy_with_a_long_prompt():
    """One request on each engine, one of them a long prompt still prefilling: by request count they tie, by
    work the next request (holding nothing anywhere) goes to the other, under either pick."""
    long, short = BackendLoad("0", True, 1, prefill_tokens=4000), BackendLoad("1", True, 1, prefill_tokens=40)
    for seed in range(20):
        assert pick([long, short], random.Random(seed), W).id == "1"
        assert pick_prefix([long, short], {}, random.Random(seed), W, P).id == "1"
    no_work = RoutingWeights(prefill_unit_tokens=0.0)
    assert {pick([long, short], random.Random(seed), no_work).id for seed in range(20)} == {"0", "1"}  # a tie


def test_a_holder_keeps_its_turns_until_its_prefill_backlog_outweighs_the_hit():
    """A whole-prompt hit is worth prefix_weight (4) requests; the holder's backlog in units of 512 tokens adds to
    its score, so past about 4 units of work ahead a turn goes to an idle engine (which then learns the prefix).
    The cap reads the work sent lately, none here: it admits both."""
    idle = BackendLoad("1", True)
    light, heavy = BackendLoad("0", True, 1, prefill_tokens=2 * 512), BackendLoad("0", True, 1, prefill_tokens=6 * 512)
    assert pick_prefix([light, idle], {"0": 1.0}, random.Random(0), W, P).id == "0"  # 1 + 2 - 4 < 0
    assert pick_prefix([heavy, idle], {"0": 1.0}, random.Random(0), W, P).id == "1"  # 1 + 6 - 4 > 0
    assert within_cap(heavy, [heavy, idle], P)


def test_equal_scores_go_to_the_engine_that_got_the_least_work_lately():
    """Idle engines tie on load: the one sent less work lately wins, not a random one (at random the prefill
    work each engine did spread 1.47x the mean on the replayed bench workload at light load)."""
    engines = [BackendLoad(str(i), True, recent_work=w) for i, w in enumerate([1.8, 0.6, 2.4, 1.2])]
    assert {pick_prefix(engines, {}, random.Random(seed), W, P).id for seed in range(20)} == {"0", "1", "3"}  # of 2
    assert {pick_prefix(engines[:2], {"0": 0.05}, random.Random(seed), W, PrefixPolicy()).id
            for seed in range(20)} == {"1"}  # a gain under min_gain: load only
    gains = {"0": 0.5, "2": 0.5}
    assert {pick_prefix(engines, gains, random.Random(seed), W, P).id for seed in range(20)} == {"0"}  # holders
    assert decayed(1000.0, 30.0, 30.0) == pytest.approx(500.0) and decayed(1000.0, -1.0, 30.0) == 1000.0
    assert uncached_tokens(1000, 0.0) == 1000 and uncached_tokens(1000, 0.75) == 250


def test_the_table_counts_the_uncached_tokens_it_sends_each_backend():
    """route() says how many of the prompt's tokens the chosen backend likely has to prefill; two first turns
    go to two engines (the second one, tied on load, to the engine that got less work), and a second turn to its
    first turn's engine, which holds most of it."""
    now = [100.0]
    table = BackendTable(W, random.Random(0), prefix=PrefixPolicy(), clock=lambda: now[0])
    table.set_endpoints([("a", "http://a"), ("b", "http://b")])
    for b in table.backends.values():
        b.ready = True
    first_a, first_b = "x" * BLOCK_CHARS * 4, "y" * BLOCK_CHARS * 4
    one, sent = table.route(frozenset(), request_keys({"prompt": first_a}), 64)
    assert sent == 64 and one.recent_work == 1 + 64 / 512 and one.recent_at == 100.0
    now[0] = 130.0
    two, sent = table.route(frozenset(), request_keys({"prompt": first_b}), 64)
    assert two.id != one.id and sent == 64
    again, sent = table.route(frozenset(), request_keys({"prompt": first_a + "z" * BLOCK_CHARS * 4}), 128)
    assert again.id == one.id and sent == 64  # holds 4 of its 8 blocks
    assert one.recent_work == pytest.approx((1 + 64 / 512) / 2 + 1 + 64 / 512)  # decayed a half-life, then the new
    assert one.load(12.0).recent_work == 12.0


def test_an_inference_service_sets_the_routing_knobs_its_gateway_reads():
    """spec.gateway.routing renders into the gateway's config under the same names: defaults from the routing
    code's own, each field one the gateway accepts."""
    from floodway.operator.gateway.config import GatewayConfig
    from floodway.operator.render.gateway import gateway_config
    from floodway.operator.spec import InferenceServiceSpec

    def routing(**given) -> GatewayConfig:
        spec = InferenceServiceSpec.model_validate({"model": "floodway/tiny-llama", "gateway": {"routing": given}})
        return GatewayConfig.model_validate(gateway_config(spec, {"static": ["http://127.0.0.1:9"]}, 9000)).routing

    assert routing().prefix_policy() == PrefixPolicy() and routing().weights() == RoutingWeights()
    assert routing(prefixAware=False).prefix_policy() is None
    set_ = routing(prefixLoadCap=2.0, prefixMinGain=0.2, prefillUnitTokens=0)
    policy = set_.prefix_policy()
    assert (policy.prefix_load_cap, policy.prefix_min_gain, set_.weights().prefill_unit_tokens) == (2.0, 0.2, 0.0)
    with pytest.raises(ValueError):
        routing(prefixLoadCap=0.5)


def test_the_prefill_a_hit_saves_counts_like_the_backlog_so_a_long_prompt_stays_with_its_holder():
    """The holder has 6 units of prefill ahead (1 + 6 - 4 > 0 with a short prompt: it goes elsewhere); a prompt of
    8 units that it holds whole would cost the idle engine those 8 units, so it stays."""
    idle, holder = BackendLoad("1", True), BackendLoad("0", True, 1, prefill_tokens=6 * 512)
    assert pick_prefix([holder, idle], {"0": 1.0}, random.Random(0), W, P, prompt_tokens=64).id == "1"
    assert pick_prefix([holder, idle], {"0": 1.0}, random.Random(0), W, P, prompt_tokens=8 * 512).id == "0"
    assert pick_prefix([holder, idle], {"0": 1.0}, random.Random(0), RoutingWeights(prefill_unit_tokens=0.0), P,
                       prompt_tokens=8 * 512).id == "0"  # work not counted: 1 - 4 < 0
