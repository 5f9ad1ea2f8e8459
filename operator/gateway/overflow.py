"""The overflow rule, the overflow budget and the circuit breaker: pure functions of plain data.

The gateway and the autoscaler's simulator call the same functions. Nothing here reads a clock: `now` is
passed in (seconds, any monotonic origin), and every state is a frozen dataclass returned anew.

Inputs of `overflow_decision(pool, policy, request, now)`:
- `pool` (PoolState): what the gateway knows of the local pool right now: `ready` (ready local replicas
  the request may still go to; the proxy leaves out replicas that already failed this request),
  `waiting` (requests queued on those replicas: scraped `vllm:num_requests_waiting`, refreshed with the
  gateway's own dispatch counts since the scrape), `predicted_ttft_s` (None when unknown: see
  `predict_ttft_from_backlog`), `held`
  (requests already held in the gateway's queue, not counting this one), and the overflow `budget` and
  `breaker` states.
- `policy` (OverflowPolicy): the service's overflow settings (thresholds, SLO, budget limits, hold queue).
- `request` (RequestInfo): estimated tokens, arrival time, the opt-out header, whether it is already held,
  and whether a local replica or the overflow API already failed it before its first byte.

Rule, in order: a trigger fires when there is no ready replica, when waiting per ready replica reaches
`max_waiting_per_replica`, or when the predicted TTFT exceeds `predicted_ttft_factor` x the TTFT SLO.
No trigger: local. Trigger and overflow allowed (enabled, no opt-out, breaker closed or probing, budget
left, the API has not failed this request): overflow. Opt-out, overflow disabled, the API failed this
request or its breaker is open (an outage must not turn servable traffic into errors): local when a
replica is ready (the engines queue it, and answer 429 themselves when full). Budget spent: the request
waits in the gateway's bounded hold queue for local capacity or budget, re-evaluated until
`hold_timeout_s` after arrival; a full queue or a passed deadline rejects it (429 with Retry-After). With
no ready replica, every blocked request waits there the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

Target = Literal["local", "overflow", "hold", "reject"]


@dataclass(frozen=True)
class BudgetLimits:
    """Overflow budget per minute; None means unlimited."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


@dataclass(frozen=True)
class BudgetState:
    """Two token buckets (requests, tokens), each refilling its per-minute limit evenly over 60 s and
    holding at most one minute's worth. Levels are None until the first `budget_refill` (then full)."""

    requests: float | None = None
    tokens: float | None = None
    at: float | None = None


def _refilled(level: float | None, limit: float | None, elapsed: float) -> float | None:
    if limit is None:
        return None
    if level is None:
        return float(limit)
    return min(float(limit), level + limit * elapsed / 60.0)


def budget_refill(state: BudgetState, limits: BudgetLimits, now: float) -> BudgetState:
    elapsed = 0.0 if state.at is None else max(0.0, now - state.at)
    return BudgetState(_refilled(state.requests, limits.requests_per_minute, elapsed),
                       _refilled(state.tokens, limits.tokens_per_minute, elapsed), now)


def _cost(tokens: int, limits: BudgetLimits) -> float:
    # A request larger than a whole minute's token budget costs the whole bucket instead of never fitting.
    return float(tokens) if limits.tokens_per_minute is None else min(float(tokens), limits.tokens_per_minute)


def budget_wait_s(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> float:
    """Seconds until the budget can pay for one request of `tokens` (0.0: it can now)."""
    state = budget_refill(state, limits, now)
    wait = 0.0
    for level, limit, cost in ((state.requests, limits.requests_per_minute, 1.0),
                               (state.tokens, limits.tokens_per_minute, _cost(tokens, limits))):
        if limit is not None and level < cost:
            wait = max(wait, math.inf if limit <= 0 else (cost - level) * 60.0 / limit)
    return wait


def budget_take(state: BudgetState, limits: BudgetLimits, tokens: int, now: float) -> BudgetState:
    """Pays for one overflow request (call after a decision to overflow)."""
    state = budget_refill(state, limits, now)
    return BudgetState(None if state.requests is None else state.requests - 1.0,
                       None if state.tokens is None else state.tokens - _cost(tokens, limits), now)


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 3  # consecutive failures that open the breaker
    cooldown_s: float = 10.0  # open this long, then one probe request is let through


@dataclass(frozen=True)
class BreakerState:
    consecutive_failures: int = 0
    opened_at: float | None = None
    probing: bool = False  # a probe request is in flight (half-open)


def breaker_allows(state: BreakerState, policy: BreakerPolicy, now: float) -> bool:
    if state.opened_at is None:
        return True
    return not state.probing and now - state.opened_at >= policy.cooldown_s


def breaker_on_send(state: BreakerState, policy: BreakerPolicy, now: float) -> BreakerState:
    """Call when a request is sent to the overflow API: after the cooldown it becomes the one probe."""
    if state.opened_at is not None and not state.probing and now - state.opened_at >= policy.cooldown_s:
        return replace(state, probing=True)
    return state


def breaker_on_result(state: BreakerState, policy: BreakerPolicy, ok: bool, now: float) -> BreakerState:
    """Call with the outcome of an overflow request (ok: it got a first byte without an error status)."""
    if ok:
        return BreakerState()
    failures = state.consecutive_failures + 1
    if state.probing or failures >= policy.failure_threshold:
        return BreakerState(failures, now, False)
    return BreakerState(failures, state.opened_at, state.probing)


def breaker_retry_after_s(state: BreakerState, policy: BreakerPolicy, now: float) -> float:
    if state.opened_at is None:
        return 0.0
    return max(0.0, state.opened_at + policy.cooldown_s - now)


@dataclass(frozen=True)
class OverflowPolicy:
    enabled: bool = False
    max_waiting_per_replica: float = 4.0
    ttft_slo_s: float | None = None
    # Overflow a little before the predicted TTFT reaches the SLO: predictions err, and at 1.0 the simulator's
    # family lost 1-3 points of attainment on spiky traffic (0.9: >= 99.6%; docs/autoscaling-measurements.md).
    predicted_ttft_factor: float = 0.9
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    hold_queue_size: int = 64
    hold_timeout_s: float = 10.0
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


@dataclass(frozen=True)
class PoolState:
    ready: int
    waiting: float = 0.0
    predicted_ttft_s: float | None = None
    held: int = 0
    budget: BudgetState = field(default_factory=BudgetState)
    breaker: BreakerState = field(default_factory=BreakerState)


@dataclass(frozen=True)
class RequestInfo:
    tokens: int  # estimated prompt + completion tokens, what the token budget is charged
    arrived_at: float
    opt_out: bool = False
    held: bool = False
    local_failed: bool = False
    overflow_failed: bool = False


@dataclass(frozen=True)
class Decision:
    target: Target
    reason: str
    retry_after_s: float | None = None  # set for "reject": when a retry may succeed


def overflow_trigger(pool: PoolState, policy: OverflowPolicy, request: RequestInfo) -> str | None:
    """The reason local capacity is short for this request, or None."""
    if pool.ready <= 0:
        return "local_error" if request.local_failed else "no_ready_backend"
    if pool.waiting / pool.ready >= policy.max_waiting_per_replica:
        return "queue_depth"
    if (policy.ttft_slo_s is not None and pool.predicted_ttft_s is not None
            and pool.predicted_ttft_s > policy.ttft_slo_s * policy.predicted_ttft_factor):
        return "predicted_ttft"
    return None


# Bounds of the gateway's floodway_gateway_replicas_needed histogram: the pool sizes a scale-down asks about.
REPLICAS_NEEDED_BUCKETS = (*range(1, 17), 20, 24, 32, 48, 64, 96, 128)


def replicas_needed(pool: PoolState, policy: OverflowPolicy) -> float | None:
    """The smallest pool that would have kept this request within the overflow threshold: its predicted TTFT x the
    ready replicas / (predicted_ttft_factor x the TTFT SLO), taking the work ahead of it to spread over the pool.
    Its own prefill does not spread, so the overflow a smaller pool would have had, read from these, is overstated,
    never understated. None: no prediction, no ready replica or no TTFT SLO."""
    if pool.predicted_ttft_s is None or pool.ready <= 0 or not policy.ttft_slo_s:
        return None
    return pool.predicted_ttft_s * pool.ready / (policy.ttft_slo_s * policy.predicted_ttft_factor)


def _blocked_reason(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, now: float) -> str | None:
    """Why this request may not overflow now, or None when it may."""
    if request.opt_out:
        return "opt_out"
    if not policy.enabled:
        return "overflow_disabled"
    if request.overflow_failed:
        return "overflow_failed"
    if not breaker_allows(pool.breaker, policy.breaker, now):
        return "breaker_open"
    if budget_wait_s(pool.budget, policy.budget, request.tokens, now) > 0.0:
        return "budget_exhausted"
    return None


def _retry_after_s(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, blocked: str, now: float) -> float:
    if blocked == "budget_exhausted":
        wait = budget_wait_s(pool.budget, policy.budget, request.tokens, now)
    elif blocked == "breaker_open":
        wait = breaker_retry_after_s(pool.breaker, policy.breaker, now)
    else:
        wait = 0.0
    return max(1.0, math.ceil(min(wait, 3600.0)))


def overflow_decision(pool: PoolState, policy: OverflowPolicy, request: RequestInfo, now: float) -> Decision:
    """Where this request goes now: "local", "overflow", "hold" (wait in the gateway, ask again) or "reject"."""
    trigger = overflow_trigger(pool, policy, request)
    if trigger is None:
        return Decision("local", "held_then_local" if request.held else "local")
    blocked = _blocked_reason(pool, policy, request, now)
    if blocked is None:
        return Decision("overflow", trigger)
    if blocked != "budget_exhausted" and pool.ready > 0:
        return Decision("local", blocked)
    retry_after = _retry_after_s(pool, policy, request, blocked, now)
    if now - request.arrived_at >= policy.hold_timeout_s:
        return Decision("reject", f"hold_timeout:{blocked}", retry_after)
    if not request.held and pool.held >= policy.hold_queue_size:
        return Decision("reject", f"hold_queue_full:{blocked}", retry_after)
    return Decision("hold", blocked)


def predict_ttft_from_backlog(backlog_tokens: float, prompt_tokens: int, engine_rate: float | None,
                              learned_rate: float | None, admission_wait: float = 0.0) -> float | None:
    """TTFT of a request sent now: the prompt tokens ahead of it on the engine (floodway_num_prefill_tokens_waiting,
    or the gateway's own requests without a first byte, whichever is more) and its own, at the prefill rate the
    engine exports (floodway_prefill_tokens_per_second: measured step times, while sequences decode), plus its wait
    for a batch slot or KV cache (`admission_wait_s`). A runtime that exports no rate (vLLM) is predicted at the
    rate earlier answers showed (`learned_prefill_rate`), and then only with something ahead: a pool that a stale
    low rate had emptied gets traffic again (the samples that correct a learned rate come only from answers it
    serves). None: no prediction (no rate yet, no admission wait). The default prediction of the gateway."""
    if engine_rate:
        return (backlog_tokens + prompt_tokens) / engine_rate + admission_wait
    if not learned_rate or backlog_tokens <= 0:
        return admission_wait or None
    return (backlog_tokens + prompt_tokens) / learned_rate + admission_wait


@dataclass(frozen=True)
class SlotHold:
    """An engine's slot-seconds (requests running x time) and finished requests, each a sum decaying with
    SLOT_HOLD_HALF_LIFE_S: their ratio is the mean time a request holds a batch slot (Little's law), recent
    traffic weighing most. Idle spans add nothing and decay nothing, so a burst after quiet minutes meets the
    hold time of the last busy span."""

    slot_s: float = 0.0
    finished: float = 0.0
    counter: float | None = None  # the engine's finished-requests counter at the last update
    running: float = 0.0  # requests running at the last update

    @property
    def mean_s(self) -> float | None:
        return self.slot_s / self.finished if self.finished > 0 else None


SLOT_HOLD_HALF_LIFE_S = 60.0


def slot_hold_update(h: SlotHold, running: float, finished_counter: float, dt_s: float) -> SlotHold:
    """After a scrape `dt_s` after the previous one: requests running now, the finished counter now."""
    if h.counter is None or finished_counter < h.counter:  # the first scrape, or the engine restarted
        return replace(h, counter=finished_counter, running=running)
    finished = finished_counter - h.counter
    if finished == 0 and running == 0 and h.running == 0:
        return h
    k = 0.5 ** (max(dt_s, 0.0) / SLOT_HOLD_HALF_LIFE_S)
    return SlotHold(h.slot_s * k + (h.running + running) / 2 * max(dt_s, 0.0), h.finished * k + finished,
                    finished_counter, running)


def slot_wait_s(requests_ahead: float, max_num_seqs: float, mean_hold_s: float | None) -> float:
    """How long a request sent now waits for a batch slot: the engine runs `max_num_seqs` at once (0: unknown) and
    has `requests_ahead` running or queued; when they fill the batch, slots free at max_num_seqs / mean hold time
    per second, and this request needs the (requests_ahead + 1 - max_num_seqs)-th. The prefill backlog alone
    missed it: behind a full batch of long answers a short prompt waits for one of them to finish."""
    need = requests_ahead + 1 - max_num_seqs
    if max_num_seqs <= 0 or need <= 0 or not mean_hold_s:
        return 0.0
    return need * mean_hold_s / max_num_seqs


def kv_wait_s(tokens_ahead: float, prompt_tokens: int, kv_usage: float, kv_tokens: float,
              mean_hold_s: float | None) -> float:
    """How long a request sent now waits for KV cache: the prompt tokens ahead of it and its own need more than the
    free share of the cache's `kv_tokens` (0: unknown), and the running requests release what they hold as they
    finish, kv_usage x kv_tokens per mean hold time. The slot wait's twin where the cache, not `max_num_seqs`, caps
    the batch (long prompts: on Mooncake at 2x the engines queue with slots free), which the prefill rate does not
    show: the queued prompts do not prefill until blocks free up."""
    short = tokens_ahead + prompt_tokens - (1.0 - kv_usage) * kv_tokens
    if kv_tokens <= 0 or kv_usage <= 0 or short <= 0 or not mean_hold_s:
        return 0.0
    return short * mean_hold_s / (kv_usage * kv_tokens)


def admission_wait_s(mean_hold_s: float | None, requests_ahead: float, max_num_seqs: float, tokens_ahead: float,
                     prompt_tokens: int, kv_usage: float, kv_tokens: float) -> float:
    """A request's wait to be admitted into the engine's batch: for a slot or for KV cache, whichever is longer (a
    finishing request frees both)."""
    return max(slot_wait_s(requests_ahead, max_num_seqs, mean_hold_s),
               kv_wait_s(tokens_ahead, prompt_tokens, kv_usage, kv_tokens, mean_hold_s))


def prefill_rate_sample(backlog_tokens: float, prompt_tokens: int, ttft_s: float) -> float | None:
    """The prefill rate one streamed answer shows: the tokens that were ahead of it and its own, over the time to
    its first byte. (A whole answer's first byte comes after its last token: the gateway samples streams only.)"""
    return (backlog_tokens + prompt_tokens) / ttft_s if ttft_s > 0 and prompt_tokens > 0 else None


PREFILL_RATE_EWMA = 0.2  # weight of each new sample in the learned prefill rate


def learned_prefill_rate(rate: float | None, sample: float | None) -> float | None:
    """The gateway's prefill rate after one more answer's sample (prefill_rate_sample; None: no sample)."""
    if sample is None:
        return rate
    return sample if rate is None else (1 - PREFILL_RATE_EWMA) * rate + PREFILL_RATE_EWMA * sample


def predict_ttft_s(waiting_per_ready: float, running_per_ready: float, mean_e2e_s: float | None,
                   base_ttft_s: float) -> float | None:
    """The former prediction, kept for the simulator's comparison (`--no-prefill-backlog-ttft`): its own prefill
    time plus the wait for the queue ahead of it to start. Queued requests start as running ones finish, so a
    replica drains `running / mean e2e latency` requests per second (Little's law); None until a latency
    has been observed. It misses bursts of long prompts, which add no requests but many prefill tokens."""
    if mean_e2e_s is None or mean_e2e_s <= 0:
        return None
    return base_ttft_s + waiting_per_ready * mean_e2e_s / max(running_per_ready, 1.0)


# A pace below any healthy API's (the slowest hosted models stream ~20 tokens/s): a whole answer slower than this
# is taken for a stalled API, not a long answer. The gateway config's overflow.slowest_tokens_per_s defaults to it.
SLOWEST_TOKENS_PER_S = 10.0


def overflow_deadline_s(first_byte_timeout_s: float, answer_timeout_s: float, stream: bool,
                        completion_limit: int | None, slowest_tokens_per_s: float = SLOWEST_TOKENS_PER_S) -> float:
    """How long the overflow API may go without sending a byte before the attempt counts as failed (and is retried
    locally). A stream's first byte is its first token, so `first_byte_timeout_s`. A whole answer's first byte
    comes after its last token: the first-byte timeout plus the tokens the request allows at the slowest healthy
    pace, at most `answer_timeout_s` (the gateway's deadline for a whole answer), which is also the deadline where
    the request names no limit. With the first-byte timeout alone, every answer longer than it counted as a
    failure, was generated twice (the API's copy thrown away) and pushed the breaker towards open."""
    if stream:
        return first_byte_timeout_s
    if completion_limit is None:
        return answer_timeout_s
    return min(answer_timeout_s, first_byte_timeout_s + completion_limit / slowest_tokens_per_s)
