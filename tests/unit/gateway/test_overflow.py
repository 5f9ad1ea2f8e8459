import math

import pytest
from floodway.operator.gateway.breaker import (
    BreakerPolicy,
    BreakerState,
    breaker_allows,
    breaker_on_result,
    breaker_on_send,
)
from floodway.operator.gateway.overflow import (
    OverflowPolicy,
    PoolState,
    RequestInfo,
    overflow_deadline_s,
    overflow_decision,
    replicas_needed,
)
from floodway.operator.gateway.overflow_budget import BudgetLimits, BudgetState, budget_take, budget_wait_s
from floodway.operator.gateway.ttft import (
    SlotHold,
    admission_wait_s,
    kv_wait_s,
    learned_prefill_rate,
    predict_ttft_from_backlog,
    predict_ttft_s,
    prefill_rate_sample,
    slot_hold_update,
    slot_wait_s,
)

POLICY = OverflowPolicy(enabled=True, max_waiting_per_replica=4, ttft_slo_s=0.5,
                        budget=BudgetLimits(max_requests_per_minute=60, max_tokens_per_minute=6000),
                        hold_queue_size=2, hold_timeout_s=5.0)
REQ = RequestInfo(tokens=100, arrived_at=0.0)


def decide(pool=None, policy=POLICY, request=REQ, now=0.0):
    return overflow_decision(pool or PoolState(ready=2), policy, request, now)


def test_local_below_threshold():
    assert decide(PoolState(ready=2, waiting=7)).target == "local"


def test_queue_depth_triggers_overflow_at_threshold():
    d = decide(PoolState(ready=2, waiting=8))
    assert (d.target, d.reason) == ("overflow", "queue_depth")


def test_no_ready_backend_and_local_error():
    assert decide(PoolState(ready=0)).reason == "no_ready_backend"
    d = decide(PoolState(ready=0), request=RequestInfo(tokens=1, arrived_at=0.0, local_failed=True))
    assert (d.target, d.reason) == ("overflow", "local_error")


def test_predicted_ttft_over_slo_times_factor():
    assert decide(PoolState(ready=1, predicted_ttft_s=0.6)).reason == "predicted_ttft"
    relaxed = OverflowPolicy(enabled=True, ttft_slo_s=0.5, predicted_ttft_factor=2.0)
    assert decide(PoolState(ready=1, predicted_ttft_s=0.6), policy=relaxed).target == "local"
    assert decide(PoolState(ready=1, predicted_ttft_s=None)).target == "local"


@pytest.mark.parametrize("blocked", ["opt_out", "overflow_disabled", "overflow_failed", "breaker_open"])
def test_blocked_overflow_stays_local_when_a_replica_is_ready(blocked):
    policy = OverflowPolicy(enabled=blocked != "overflow_disabled")
    req = RequestInfo(tokens=1, arrived_at=0.0, opt_out=blocked == "opt_out",
                      overflow_failed=blocked == "overflow_failed")
    breaker = BreakerState(3, opened_at=0.0) if blocked == "breaker_open" else BreakerState()
    d = decide(PoolState(ready=1, waiting=100, breaker=breaker), policy=policy, request=req)
    assert (d.target, d.reason) == ("local", blocked)
    assert decide(PoolState(ready=0, breaker=breaker), policy=policy, request=req).target == "hold"


def test_budget_exhausted_holds_then_rejects_with_retry_after():
    spent = BudgetState(requests=0.0, tokens=6000.0, at=0.0)
    pool = PoolState(ready=1, waiting=10, budget=spent)
    assert decide(pool) == overflow_decision(pool, POLICY, REQ, 0.0)
    assert (decide(pool).target, decide(pool).reason) == ("hold", "budget_exhausted")
    full = decide(PoolState(ready=1, waiting=10, budget=spent, held=2))
    assert full.target == "reject" and full.reason == "hold_queue_full:budget_exhausted"
    assert full.retry_after_s == 1.0  # one request refills in 1 s at 60/min
    late = decide(pool, request=RequestInfo(tokens=100, arrived_at=0.0, held=True), now=0.5)
    assert late.target == "hold"
    timeout = decide(pool, request=RequestInfo(tokens=100, arrived_at=0.0, held=True), now=5.0)
    assert timeout.target == "overflow"  # refilled by then
    pool_later = PoolState(ready=1, waiting=10, budget=BudgetState(requests=0.0, tokens=6000.0, at=5.0))
    timeout = decide(pool_later, request=RequestInfo(tokens=100, arrived_at=0.0, held=True), now=5.0)
    assert timeout.target == "reject" and timeout.reason.startswith("hold_timeout")


def test_held_request_goes_local_when_queue_drains():
    d = decide(PoolState(ready=1, waiting=0), request=RequestInfo(tokens=1, arrived_at=0.0, held=True))
    assert d.target == "local"


def test_budget_buckets_refill_and_cap():
    limits = BudgetLimits(max_requests_per_minute=2, max_tokens_per_minute=100)
    s = BudgetState()
    assert budget_wait_s(s, limits, 50, 0.0) == 0.0
    s = budget_take(s, limits, 50, 0.0)
    s = budget_take(s, limits, 50, 0.0)
    assert budget_wait_s(s, limits, 50, 0.0) == pytest.approx(30.0)  # 2/min: one request per 30 s
    assert budget_wait_s(s, limits, 50, 30.0) == pytest.approx(0.0)
    # A request bigger than a minute's tokens costs the whole bucket instead of never fitting.
    assert budget_wait_s(BudgetState(), limits, 10_000, 0.0) == 0.0
    assert budget_wait_s(BudgetState(), BudgetLimits(max_requests_per_minute=0), 1, 0.0) == math.inf
    assert budget_wait_s(BudgetState(), BudgetLimits(), 10**9, 0.0) == 0.0  # unlimited


def test_breaker_opens_probes_and_closes():
    p = BreakerPolicy(failure_threshold=2, cooldown_s=10)
    s = BreakerState()
    s = breaker_on_result(s, p, ok=False, now=0.0)
    assert breaker_allows(s, p, 0.0)
    s = breaker_on_result(s, p, ok=False, now=1.0)
    assert not breaker_allows(s, p, 1.0) and not breaker_allows(s, p, 10.9)
    assert breaker_allows(s, p, 11.0)
    s = breaker_on_send(s, p, 11.0)
    assert s.probing and not breaker_allows(s, p, 11.0)  # one probe at a time
    reopened = breaker_on_result(s, p, ok=False, now=12.0)
    assert reopened.opened_at == 12.0 and not breaker_allows(reopened, p, 21.0)
    assert breaker_on_result(s, p, ok=True, now=12.0) == BreakerState()


def test_breaker_open_holds_with_retry_after():
    pool = PoolState(ready=0, breaker=BreakerState(3, opened_at=0.0), held=2)
    d = decide(pool, now=1.0)
    assert d.target == "reject" and d.reason == "hold_queue_full:breaker_open" and d.retry_after_s == 9.0


def test_replicas_needed_is_the_pool_at_which_the_prediction_would_just_reach_the_overflow_threshold():
    # 0.9 s predicted on 2 ready replicas against a 0.45 s threshold (0.9 x 0.5 s): the work ahead spread over 4
    # would have kept it local. Exactly at the threshold it needs the pool it has.
    assert replicas_needed(PoolState(ready=2, predicted_ttft_s=0.9), POLICY) == pytest.approx(4.0)
    assert replicas_needed(PoolState(ready=3, predicted_ttft_s=0.45), POLICY) == pytest.approx(3.0)
    assert replicas_needed(PoolState(ready=3, predicted_ttft_s=0.1), POLICY) == pytest.approx(2 / 3)
    # Nothing to say without a prediction, a ready replica or a TTFT SLO.
    assert replicas_needed(PoolState(ready=2), POLICY) is None
    assert replicas_needed(PoolState(ready=0, predicted_ttft_s=0.9), POLICY) is None
    assert replicas_needed(PoolState(ready=2, predicted_ttft_s=0.9), OverflowPolicy(enabled=True)) is None


def test_predict_ttft():
    assert predict_ttft_s(4, 2, 1.0, 0.1) == pytest.approx(2.1)
    assert predict_ttft_s(4, 0, 1.0, 0.1) == pytest.approx(4.1)
    assert predict_ttft_s(4, 2, None, 0.1) is None


def test_a_request_behind_a_full_batch_waits_for_a_slot():
    # 8 slots: with 7 on the engine the 8th starts at once; each one more waits for one more of 8 slots to free,
    # which a full batch of 4 s answers does every 0.5 s.
    assert slot_wait_s(7, 8, 4.0) == 0.0
    assert slot_wait_s(8, 8, 4.0) == pytest.approx(0.5) and slot_wait_s(11, 8, 4.0) == pytest.approx(2.0)
    assert slot_wait_s(11, 0, 4.0) == 0.0 and slot_wait_s(11, 8, None) == 0.0  # no batch size, or no hold time yet
    # It adds to the prefill prediction, and predicts alone where there is no rate.
    assert predict_ttft_from_backlog(6000, 2000, 10_000.0, None, 0.5) == pytest.approx(1.3)
    assert predict_ttft_from_backlog(0, 2000, None, None, 0.5) == pytest.approx(0.5)
    # A burst of short prompts: no prefill backlog to speak of and one queued, under the queue-depth rule's 4,
    # yet behind a full batch of 4 s answers: overflow on predicted TTFT.
    pool = PoolState(ready=1, waiting=1, predicted_ttft_s=predict_ttft_from_backlog(50, 50, 10_000.0, None,
                                                                                     slot_wait_s(9, 8, 4.0)))
    d = overflow_decision(pool, OverflowPolicy(enabled=True, ttft_slo_s=0.5), RequestInfo(300, 0.0), 0.0)
    assert (d.target, d.reason) == ("overflow", "predicted_ttft")


def test_a_request_behind_a_full_kv_cache_waits_for_blocks_to_free():
    # A 100k-token cache 90% used: 10k free. 6k prompt tokens queued ahead and a 2k prompt fit; 12k ahead leave this
    # one 4k short, which finishing requests free at 90k per 4 s hold: 4000 / 90000 x 4 s.
    assert kv_wait_s(6000, 2000, 0.9, 100_000, 4.0) == 0.0
    assert kv_wait_s(12_000, 2000, 0.9, 100_000, 4.0) == pytest.approx(4000 / 90_000 * 4.0)
    # Unknown cache size, an empty cache or no hold time yet: no wait predicted.
    assert kv_wait_s(12_000, 2000, 0.9, 0, 4.0) == 0.0 and kv_wait_s(12_000, 2000, 0.9, 100_000, None) == 0.0
    assert kv_wait_s(200_000, 2000, 0.0, 100_000, 4.0) == 0.0
    # Admission waits for a slot and for blocks: the longer of the two (one finish frees both).
    assert admission_wait_s(4.0, 3, 8, 12_000, 2000, 0.9, 100_000) == pytest.approx(kv_wait_s(12_000, 2000, 0.9,
                                                                                               100_000, 4.0))
    assert admission_wait_s(4.0, 11, 8, 0, 2000, 0.9, 100_000) == pytest.approx(slot_wait_s(11, 8, 4.0))
    # Long prompts queued with slots free and little prefill rate spent on them: the queue-depth rule (4 per
    # replica) lets the request through, the KV wait overflows it.
    wait = admission_wait_s(4.0, 5, 64, 30_000, 8000, 0.95, 100_000)
    pool = PoolState(ready=1, waiting=2, predicted_ttft_s=predict_ttft_from_backlog(30_000, 8000, 200_000.0, None,
                                                                                     wait))
    d = overflow_decision(pool, OverflowPolicy(enabled=True, ttft_slo_s=0.5), RequestInfo(8100, 0.0), 0.0)
    assert (d.target, d.reason) == ("overflow", "predicted_ttft")
    assert predict_ttft_from_backlog(30_000, 8000, 200_000.0, None) < 0.45  # without it: local


def test_the_mean_slot_hold_is_littles_law_over_scrapes_and_ignores_idle_spans():
    h = slot_hold_update(SlotHold(), running=4, finished_counter=100, dt_s=0.0)  # the first scrape: a baseline
    assert h.mean_s is None and h.counter == 100
    for _ in range(20):  # 4 running, one finishing each second: each holds its slot 4 s
        h = slot_hold_update(h, running=4, finished_counter=h.counter + 1, dt_s=1.0)
    assert h.mean_s == pytest.approx(4.0, rel=0.05)
    idle = slot_hold_update(slot_hold_update(h, 0, h.counter, 1.0), 0, h.counter, 600.0)
    assert idle.mean_s == pytest.approx(slot_hold_update(h, 0, h.counter, 1.0).mean_s)  # quiet minutes forget nothing
    restarted = slot_hold_update(h, running=1, finished_counter=3, dt_s=1.0)  # the counter went back: a new engine
    assert restarted.counter == 3 and restarted.mean_s == pytest.approx(h.mean_s)
    for _ in range(600):  # ten minutes of 2 s answers outweigh the 4 s ones
        h = slot_hold_update(h, running=4, finished_counter=h.counter + 2, dt_s=1.0)
    assert h.mean_s == pytest.approx(2.0, rel=0.05)


def test_predict_ttft_from_the_prefill_backlog_at_the_engines_rate_else_the_learned_one():
    assert predict_ttft_from_backlog(6000, 2000, None, None) is None  # no rate measured yet: no TTFT trigger
    assert predict_ttft_from_backlog(6000, 2000, 10_000.0, None) == pytest.approx(0.8)
    assert predict_ttft_from_backlog(6000, 2000, 10_000.0, 1.0) == pytest.approx(0.8)  # the engine's rate first
    assert predict_ttft_from_backlog(6000, 2000, None, 4000.0) == pytest.approx(2.0)  # an engine exporting none
    # Nothing queued: the engine's own rate still predicts (a lone 20k-token prompt misses a 0.5 s SLO)...
    assert predict_ttft_from_backlog(0, 20_000, 10_000.0, None) == pytest.approx(2.0)
    # ...a learned one does not, so a stale low rate cannot keep an idle pool empty (seen on a real node: every
    # request overflowed and the engine, serving none, never sampled a better rate).
    assert predict_ttft_from_backlog(0, 2000, None, 1.0) is None
    # A burst of long prompts adds few requests but many tokens: the queue-depth rule sees 2 waiting, the
    # backlog shows the 0.5 s SLO missed.
    pool = PoolState(ready=1, waiting=2, predicted_ttft_s=predict_ttft_from_backlog(2 * 4000, 2000, 10_000.0, None))
    d = overflow_decision(pool, OverflowPolicy(enabled=True, ttft_slo_s=0.5), RequestInfo(2100, 0.0), 0.0)
    assert (d.target, d.reason) == ("overflow", "predicted_ttft")
    # The rate a request shows: the tokens ahead of it and its own over its time to first byte.
    assert prefill_rate_sample(6000, 2000, 0.8) == pytest.approx(10_000.0)
    assert prefill_rate_sample(6000, 0, 0.8) is None and prefill_rate_sample(6000, 10, 0.0) is None


def test_the_learned_prefill_rate_starts_at_the_first_sample_and_moves_a_fifth_of_the_way():
    assert learned_prefill_rate(None, None) is None and learned_prefill_rate(None, 8000.0) == 8000.0
    assert learned_prefill_rate(8000.0, 18000.0) == pytest.approx(10_000.0)
    assert learned_prefill_rate(8000.0, None) == 8000.0


def test_a_whole_answer_may_take_as_long_as_its_tokens_at_the_slowest_pace_a_stream_only_the_first_byte_timeout():
    assert overflow_deadline_s(30.0, 600.0, stream=True, completion_limit=4000) == 30.0
    assert overflow_deadline_s(30.0, 600.0, stream=False, completion_limit=500) == 30.0 + 500 / 10.0
    assert overflow_deadline_s(30.0, 600.0, stream=False, completion_limit=8000) == 600.0  # at most a whole answer's
    assert overflow_deadline_s(30.0, 600.0, stream=False, completion_limit=None) == 600.0  # no limit named
    assert overflow_deadline_s(1.0, 600.0, stream=False, completion_limit=8) == pytest.approx(1.8)
    assert overflow_deadline_s(1.0, 600.0, stream=False, completion_limit=8, slowest_tokens_per_s=1.0) == 9.0
