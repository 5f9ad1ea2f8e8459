"""Admission control (pure): admit a request, or refuse it with 429 and a Retry-After estimate.

Bounding the queue keeps latency for admitted requests bounded during a burst, and gives a gateway a
fast, explicit signal to overflow elsewhere instead of letting requests wait without limit.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionPolicy:
    max_waiting_requests: int | None = 256  # None: unbounded
    max_waiting_tokens: int | None = None  # prompt tokens of requests not yet producing output


@dataclass(frozen=True)
class QueueState:
    waiting_requests: int
    waiting_tokens: int
    drain_rate_per_s: float = 0.0  # requests leaving the waiting queue per second, recent average


@dataclass(frozen=True)
class Admission:
    admit: bool
    retry_after_s: int = 0
    reason: str = ""


MIN_RETRY_S, MAX_RETRY_S = 1, 60


def retry_after(excess_requests: int, drain_rate_per_s: float) -> int:
    """Seconds until the queue should have room for this request again, clamped to [1, 60]."""
    if drain_rate_per_s <= 0:
        return MIN_RETRY_S
    return max(MIN_RETRY_S, min(MAX_RETRY_S, math.ceil(excess_requests / drain_rate_per_s)))


def decide(state: QueueState, prompt_tokens: int, policy: AdmissionPolicy) -> Admission:
    max_req, max_tok = policy.max_waiting_requests, policy.max_waiting_tokens
    if max_req is not None and state.waiting_requests + 1 > max_req:
        excess = state.waiting_requests + 1 - max_req
        return Admission(False, retry_after(excess, state.drain_rate_per_s),
                         f"{state.waiting_requests} requests are waiting (limit {max_req})")
    # A single prompt larger than the whole token bound is still admitted into an empty queue.
    if max_tok is not None and state.waiting_requests > 0 and state.waiting_tokens + prompt_tokens > max_tok:
        return Admission(False, retry_after(1, state.drain_rate_per_s),
                         f"{state.waiting_tokens} prompt tokens are waiting (limit {max_tok})")
    return Admission(True)
