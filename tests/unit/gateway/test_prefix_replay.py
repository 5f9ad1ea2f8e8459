"""The offline replay of the routing bench (prefix_replay.py): the engines' own scheduler and block pool in simulated
time, each miss against the single-engine bound put down to its cause, and what it found on the bench's workload."""

import pytest
from floodway.operator.bench.prefix_replay import EngineShape, Router, replay, report, routers, ttft_at_bound
from floodway.operator.bench.routing import (
    mooncake_conversations,
    render,
    single_engine_bound,
    spread,
    token_ids,
    words,
)
from floodway.operator.gateway.routing import PrefixPolicy, RoutingWeights

PROMPT = list(range(100, 228))  # 8 blocks of 16 tokens
AWARE = Router("prefix-aware", PrefixPolicy(), "tokens")


def test_a_turn_admitted_while_its_prefix_is_still_prefilling_misses_it_in_flight():
    """Step 1 prefills 100 of the first prompt's tokens (6 blocks cached at its end); the twin, come meanwhile,
    is admitted at step 2 beside the rest: 6 of its 7 bound blocks hit, the 7th was routed there, not computed."""
    shape = EngineShape(max_num_batched_tokens=100, step_s=1.0)
    result = replay([PROMPT, PROMPT], ["", ""], 10.0, 1, shape, AWARE)
    assert result.hit_tokens == 6 * 16 and result.lost == {"in flight": 16}
    assert result.ttft == pytest.approx([2.0, 1.9])  # both prompts complete in step 2


def test_a_turn_the_cap_sends_away_from_its_holder_misses_it_elsewhere():
    strict = Router("no room", PrefixPolicy(prefix_load_cap=1.0, prefix_load_slack=0.0), "tokens")
    result = replay([PROMPT, PROMPT], ["", ""], 10.0, 2, EngineShape(), strict)
    assert sorted(result.served.values()) == [1, 1] and result.hit_tokens == 0
    assert result.lost == {"elsewhere": 7 * 16}
    together = replay([PROMPT, PROMPT], ["", ""], 10.0, 2, EngineShape(), AWARE)
    assert sorted(together.served.values()) == [2] and together.hit_tokens > 0


def test_a_prefix_pushed_out_of_the_engines_lru_misses_it_evicted():
    other = list(range(1000, 1112))  # 7 blocks: with its output it needs all 8 blocks, evicting the first prompt's
    shape = EngineShape(num_blocks=8)
    result = replay([PROMPT[:64], other, PROMPT[:64]], ["", "", ""], 0.01, 1, shape, AWARE)
    assert result.hit_tokens == 0 and result.lost == {"evicted": 3 * 16}
    assert replay([PROMPT[:64], other, PROMPT[:64]], ["", "", ""], 0.01, 1, EngineShape(), AWARE).hit_tokens == 48


def test_on_the_bench_workload_the_cap_on_recent_work_evens_requests_out_and_keeps_the_hits():
    """The bench's Mooncake-shaped requests through the gateway's text keys. On a quiet machine (0.08 s steps) a
    conversation's turns come one at a time, so nothing in flight stops its holder taking all of them: with no cap
    the requests each engine served spread past 1.3x the mean; capped on recent work, within 1.25x on every
    seed, at >= 90% of the single-engine bound's hits; with engines queueing (1 s steps) too."""
    texts = [render(ids, 0, words()) for ids in mooncake_conversations(40, 32)]
    prompts = token_ids(texts)
    bound_hits, _ = single_engine_bound(prompts)

    def runs(policy: PrefixPolicy, step_s: float) -> list:
        return [replay(prompts, texts, 0.5, 4, EngineShape(step_s=step_s), Router("p", policy), seed)
                for seed in range(4)]

    def requests_spread(r) -> float:
        return spread([r.served[e] for e in range(4)])

    quiet, uncapped = runs(PrefixPolicy(), 0.08), runs(PrefixPolicy(prefix_load_cap=float("inf")), 0.08)
    assert max(map(requests_spread, quiet)) <= 1.25 < sum(map(requests_spread, uncapped)) / 4 - 0.02
    assert min(r.hit_tokens for r in quiet) >= 0.9 * bound_hits
    queued = runs(PrefixPolicy(), 1.0)
    assert max(map(requests_spread, queued)) <= 1.25 and sum(r.hit_tokens for r in queued) >= 0.9 * 4 * bound_hits


def test_the_report_compares_every_router_per_step_time():
    out = report(4, 10, 0.5, EngineShape(), 32, [1.0, 2.0], 1).splitlines()
    rows = [line.split() for line in out[2:]]
    assert [r[0] for r in rows] == ["1s"] * (len(routers()) + 1) + ["2s"] * (len(routers()) + 1)
    routed = [r for r in rows if r[1:4] != ["at", "the", "bound"]]
    assert len(routed) == 2 * len(routers())
    assert all(r[-4] == r[-2] == "/" and r[-1].endswith("%") for r in routed)  # lost: elsewhere / in flight / evicted
    with pytest.raises(ValueError):
        report(4, 10, 0.5, EngineShape(), 32, [0.0], 1)


def test_the_best_ttft_on_idle_engines_is_the_uncached_tokens_in_steps():
    """At the bound the twin holds 7 of its 8 blocks: 16 tokens, one step; the first, 128 tokens, two steps."""
    assert ttft_at_bound([PROMPT, PROMPT], EngineShape(step_s=0.5)) == [1.0, 0.5]


def test_on_a_quiet_machine_the_least_recent_work_tie_break_evens_the_prefill_work_out():
    """0.08 s steps: every engine is idle when a request comes, so first turns tie on load. Drawn at random
    (recent work forgotten at once), the prompt tokens each engine computed spread well past 1.3x the mean; sent to
    the engine that got the least work lately, within it."""
    texts = [render(ids, 0, words()) for ids in mooncake_conversations(40, 32)]
    prompts = token_ids(texts)
    shape = EngineShape(step_s=0.08)

    def work_spread(weights: RoutingWeights) -> float:
        runs = [replay(prompts, texts, 0.5, 4, shape, Router("p", PrefixPolicy(), weights=weights), seed)
                for seed in range(3)]
        return sum(spread([r.prefill[e] for e in range(4)]) for r in runs) / 3

    assert work_spread(RoutingWeights()) <= 1.3 < work_spread(RoutingWeights(recent_half_life_s=1e-9))
