import pytest
from floodway.engine.server.admission import AdmissionPolicy, QueueState, decide, retry_after


def test_admits_below_the_request_bound_and_refuses_at_it():
    policy = AdmissionPolicy(max_waiting_requests=3)
    assert decide(QueueState(2, 100), 10, policy).admit
    refused = decide(QueueState(3, 100), 10, policy)
    assert not refused.admit and refused.retry_after_s >= 1 and "3 requests are waiting (limit 3)" in refused.reason


def test_unbounded_policy_always_admits():
    assert decide(QueueState(10_000, 10**9), 10**6, AdmissionPolicy(None, None)).admit


def test_token_bound_refuses_when_waiting_prompt_tokens_would_exceed_it():
    policy = AdmissionPolicy(max_waiting_requests=None, max_waiting_tokens=1000)
    assert decide(QueueState(2, 900), 100, policy).admit
    refused = decide(QueueState(2, 900), 101, policy)
    assert not refused.admit and "prompt tokens" in refused.reason


def test_a_prompt_larger_than_the_token_bound_still_runs_alone():
    policy = AdmissionPolicy(max_waiting_requests=None, max_waiting_tokens=1000)
    assert decide(QueueState(0, 0), 5000, policy).admit
    assert not decide(QueueState(1, 10), 5000, policy).admit


@pytest.mark.parametrize("excess,rate,expected", [
    (1, 0.0, 1),      # no drain observed yet: retry soon
    (10, 2.0, 5),     # ten ahead at two per second
    (3, 10.0, 1),     # rounds up to at least one second
    (1000, 1.0, 60),  # clamped
])
def test_retry_after_estimates_drain_time(excess, rate, expected):
    assert retry_after(excess, rate) == expected


def test_retry_after_uses_drain_rate_and_excess():
    policy = AdmissionPolicy(max_waiting_requests=4)
    assert decide(QueueState(13, 0, drain_rate_per_s=2.0), 1, policy).retry_after_s == 5  # 10 over, 2/s
