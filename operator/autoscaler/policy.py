"""Floodway's autoscaling policy: a pure function of (state, signals, policy, clock).

Demand is the concurrency the service must hold: requests running and waiting on the engines, held in the
gateway, and the concurrency sent to the overflow API (overflow rate x observed service time, Little's law),
so overflow is paid back by local replicas instead of hiding the shortage. With `prefill_tokens_per_second` (a
replica's prefill rate, from the engine profile) demand is also counted in tokens: the prompt tokens/s arriving,
over `prefill_target` of a replica's rate, in the same units (one replica's worth is `per_replica`), and the larger
of the two counts, since long prompts with short answers fill prefill without moving the requests in flight. The
prompt tokens may wait for prefill as long as the TTFT SLO allows (`prefill_rate_needed`). Replicas are sized so
that each holds at most `per_replica` requests in flight: `target_concurrency`, or `decode_sequences` (the
sequences the profile's decode steps fit within the TPOT SLO) where that is fewer; and KV usage at most
`kv_cache_target`:
- scale up on the demand averaged over `scale_up_window_seconds`, once requests in flight exceed the pool's target
  by more than `scale_up_tolerance` (prompt tokens, without an overflow budget: at once, on their peak over that
  window, since prefill must keep up with bursts for TTFT; KV usage: on its average too, as long prompts fill the
  cache only for the seconds they prefill and decode, far less than a cold start), at most `max_scale_up_step`
  replicas per decision;
- SLO feedback: attainment below target while requests queue or overflow adds a replica (when none is still
  starting, so a cold start is not answered by piling up more), which no scale-down removes for
  `scale_down_stabilization_seconds` (demand alone cannot see a shortage that only the SLO showed). "Below" means
  by more than `slo_noise_z` standard errors of the window's sample: a pool exactly at target shows misses too;
- panic: what the pool must hold (the demand, or with an overflow budget its sizing) >= `panic_threshold` x the
  ready replicas' capacity jumps at once and blocks scale-down for `panic_hold_seconds`; the first request seen
  while at zero replicas scales to one at once;
- scale down only when no panic, attainment is at target, and the peak demand of the last
  `scale_down_stabilization_seconds` (prompt tokens: of the last `token_stabilization_s`, as bursts of long prompts
  come and go faster than a cold start) fits the smaller pool at `scale_down_utilization` of its capacity, and so
  does the KV usage averaged as for a scale-up (one tick's dip would flap), at most `max_scale_down_step` replicas
  per decision and `scale_down_interval_seconds` after the last change (in-flight counts grow as a pool shrinks:
  look before the next step), never to a pool the scale-up rule would grow right back;
- bounds; with replicas_min 0, scale to zero after `scale_to_zero_after_seconds` without any demand (None: never).
- SLO classes (spec.classes, classes.py): a class with maxReplicas (`class_caps`) counts in the demand only up to its
  cap, and where the gateways measure the classes' attainment (their answers' TTFT and TPOT, judged together as
  the engines' are) the SLO feedback reads it, class by class, in place of the engines' (a class at its cap adds no
  replica).

The fields named as the spec's (operator/spec/models.py: autoscaling.*, replicas.* and slo.* as replicas_*, slo_*)
take their values and defaults from it (controller/scaling.autoscaler_policy); the others are the policy's own.
Overflow budget (`overflow_share` > 0, only where the gateway overflows): budget.py. How the defaults were
chosen: docs/benchmarks/ (the autoscaling pages and autoscaler-code-notes.md).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from floodway.operator.autoscaler.budget import (
    OverflowSpend,
    allowed_share,
    excess_overflow_rate,
    overflow_if,
    service_attainment,
    spend,
)
from floodway.operator.autoscaler.classes import below_target, measured, short_class, weighed_demand
from floodway.operator.autoscaler.history import DAY_S
from floodway.operator.autoscaler.signals import Signals
from floodway.operator.gateway.overflow_budget import SHARE_WINDOW_S

# A spec without autoscaling.targetConcurrency sizes a replica for this share of its batch (engine.maxNumSeqs): the
# rest is headroom for the arrivals of a decision interval.
TARGET_BATCH_SHARE = 0.625


@dataclass(frozen=True)
class AutoscalerPolicy:
    # The spec's settings, under its names (no defaults here: the spec's are the defaults).
    replicas_min: int
    replicas_max: int
    slo_attainment: float
    slo_ttft_ms: float  # how long prompt tokens may wait for prefill
    interval_seconds: float
    target_concurrency: float  # requests in flight per replica at which it still meets the SLO
    kv_cache_target: float
    scale_up_window_seconds: float
    max_scale_up_step: int
    panic_threshold: float
    panic_hold_seconds: float
    scale_down_stabilization_seconds: float
    scale_down_utilization: float
    max_scale_down_step: int
    scale_down_interval_seconds: float  # between two changes before a scale-down: see the smaller pool's load
    scale_to_zero_after_seconds: float | None
    slo_noise_z: float  # SLO feedback needs attainment this many standard errors below target
    prefill_tokens_per_second: float  # a replica's prefill rate (0: demand in requests only)
    decode_sequences: float  # sequences a replica decodes within the TPOT SLO (0: unknown)
    overflow_share: float  # share of requests it may leave to the overflow API (0: pay all back)
    priority: str  # "slo" or "budget": with budget the gateway caps overflow at overflow_share
    forecast_lead_seconds: float  # how far ahead the history's expectation is read (0: no forecast)
    class_caps: tuple[tuple[str, int], ...] = ()  # (class, its maxReplicas) for the spec's classes with a cap
    # The policy's own settings.
    scale_up_tolerance: float = 0.1  # requests in flight may exceed the target by this share before a replica is added
    assumed_request_s: float = 10.0  # service time assumed for overflowed demand before any is observed
    overflow_budget_window_s: float = SHARE_WINDOW_S  # horizon of the spent-share estimate (the gateway's too)
    prefill_target: float = 0.5  # share of the prefill rate a replica is sized to carry (TTFT headroom for bursts)
    token_stabilization_s: float = 900.0  # scale-down waits until this long's peak token demand fits
    day_s: float = DAY_S  # a day of the history the forecast reads (the simulator's days are compressed)

    def __post_init__(self):
        problems = []
        if self.replicas_min < 0 or self.replicas_max < max(self.replicas_min, 1):
            problems.append(f"need 0 <= replicas_min <= replicas_max and replicas_max >= 1 "
                            f"(got {self.replicas_min}, {self.replicas_max})")
        for name in ("interval_seconds", "target_concurrency", "kv_cache_target", "panic_threshold",
                     "scale_down_utilization", "assumed_request_s", "prefill_target", "token_stabilization_s",
                     "day_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if self.scale_up_tolerance < 0:
            problems.append("scale_up_tolerance must be >= 0")
        if self.max_scale_up_step < 1 or self.max_scale_down_step < 1:
            problems.append("max_scale_up_step and max_scale_down_step must be >= 1")
        if not 0 <= self.overflow_share < 1:
            problems.append("overflow_share must be in [0, 1)")
        if self.prefill_tokens_per_second < 0 or self.decode_sequences < 0:
            problems.append("prefill_tokens_per_second and decode_sequences must be >= 0")
        if self.slo_ttft_ms < 0:
            problems.append("slo_ttft_ms must be >= 0")
        if self.slo_noise_z < 0 or self.forecast_lead_seconds < 0:
            problems.append("slo_noise_z and forecast_lead_seconds must be >= 0")
        if self.overflow_budget_window_s <= 0:
            problems.append("overflow_budget_window_s must be > 0")
        if not 0 < self.slo_attainment <= 1:
            problems.append("slo_attainment must be in (0, 1]")
        if problems:
            raise ValueError("bad autoscaler policy: " + "; ".join(problems))

    @property
    def per_replica(self) -> float:
        """Requests in flight one replica is sized for: target_concurrency, or fewer where the profile says the
        replica decodes fewer sequences within the TPOT SLO."""
        return min(self.target_concurrency, self.decode_sequences or math.inf)


@dataclass(frozen=True)
class ScalerState:
    """What a policy remembers between ticks (shared by all policies in this package)."""

    replicas: int  # the last desired replica count
    last_scale_time: float | None = None
    panic_until: float = -math.inf
    slo_hold_until: float = -math.inf  # a replica SLO feedback added is not removed before this
    history: tuple[tuple[float, float], ...] = ()  # (time, observed demand) within the longest window
    last_busy: float | None = None  # last time demand was seen (None: never)
    observed_since: float | None = None  # first tick: no scale-down before a full window was observed
    sizing: tuple[tuple[float, float], ...] = ()  # (time, demand the pool must hold) for scale-up
    tokens: tuple[tuple[float, float], ...] = ()  # (time, token demand) for scale-up
    prompts: tuple[tuple[float, tuple[float, float]], ...] = ()  # (time, (window s, prompt tokens arrived in it))
    kv: tuple[tuple[float, float], ...] = ()  # (time, KV usage summed over the ready replicas)
    needed: tuple[tuple[float, Mapping[float, float]], ...] = ()  # (time, Signals.replicas_needed) for scale-down
    spent: OverflowSpend = OverflowSpend()  # the overflow share spent
    foreseen: tuple[tuple[float, float], ...] = ()  # (time, replicas the history's expectation needs) for scale-down
    served: tuple[tuple[float, tuple[float, float]], ...] = ()  # (time, (requests running, finished/s)): service time


@dataclass(frozen=True)
class ScaleDecision:
    replicas: int
    reason: str
    state: ScalerState  # pass to the next decide()


def remember(history, now: float, value: float, keep_s: float) -> tuple[tuple[float, float], ...]:
    return tuple((t, v) for t, v in history if t > now - keep_s) + ((now, value),)


def window(history, now: float, span_s: float) -> list[float]:
    return [v for t, v in history if t > now - span_s]


def scaled(state: ScalerState, now: float, replicas: int, reason: str, **changes) -> ScaleDecision:
    """A ScaleDecision that records the scale time when the count changes."""
    moved = replicas != state.replicas
    new = replace(state, replicas=replicas, last_scale_time=now if moved else state.last_scale_time, **changes)
    return ScaleDecision(replicas, reason if moved else f"hold: {reason}", new)


def service_time(signals: Signals, assumed_request_s: float) -> float:
    if signals.finished_rate > 0 and signals.total_running > 0:
        return signals.total_running / signals.finished_rate
    return assumed_request_s


def prefill_rate_needed(prompts, slack_s: float) -> float:
    """Prompt tokens/s of prefill that clear every recent span's arrivals within that span plus `slack_s`.
    prompts: (window s, prompt tokens arrived in it) per tick, oldest first. A queue served at rate c keeps every
    arrival's wait within the slack iff the tokens of each span w fit c x (w + slack), so c is the largest
    tokens / (w + slack) over the spans ending now. With no slack that is the busiest tick's rate; a 5 s TTFT SLO
    lets a burst wait, so a tick's burst counts as spread over 5 s more and longer spans count near their mean."""
    need = tokens = span = 0.0
    for window_s, arrived in reversed(prompts):
        tokens, span = tokens + arrived, span + window_s
        need = max(need, tokens / (span + slack_s))
    return need


def token_demand(prompts, p: "AutoscalerPolicy") -> float:
    """The prefill the prompt tokens arriving need within the TTFT SLO's slack, in replicas' worth of concurrency
    (0 without a prefill rate). The slack counts in whole decision intervals: the policy sees arrivals per tick, and
    `prefill_target` is the headroom for a burst within a tick that the tick's rate hides. Where the SLO lets
    prompts wait an interval or more, the slack absorbs that burst and a replica is sized for its whole prefill
    rate."""
    if not p.prefill_tokens_per_second:
        return 0.0
    slack_s = math.floor(p.slo_ttft_ms / 1000.0 / p.interval_seconds) * p.interval_seconds
    share = 1.0 if slack_s else p.prefill_target
    return prefill_rate_needed(prompts, slack_s) / (p.prefill_tokens_per_second * share) * p.per_replica


def foreseen(signals: Signals, p: "AutoscalerPolicy", allow: float, served: list[tuple[float, float]]) -> int:
    """Replicas for the traffic the service's history expects within the next cold start (forecast.py), sized as
    demand is: its requests (Little's law, at the service time of `served`: (requests running, finished/s) per tick
    of the stabilization window, as one tick's ratio swings 10x on a quiet service) less the `allow`ed overflow share,
    and, without an overflow budget, its prompt tokens at `prefill_target` of a replica's prefill rate; 0 with no
    expectation. A pool counts as holding it as the scale-up rule's would: within `scale_up_tolerance`."""
    running, finished = sum(r for r, _ in served), sum(f for _, f in served)
    service_s = running / finished if finished > 0 and running > 0 else p.assumed_request_s
    held = signals.expected_arrival_rate * service_s * (1 - allow)
    if p.prefill_tokens_per_second and not p.overflow_share:
        held = max(held, signals.expected_prompt_token_rate / (p.prefill_tokens_per_second * p.prefill_target)
                   * p.per_replica)
    return math.ceil(held / (p.per_replica * (1 + p.scale_up_tolerance)))  # within the scale-up rule's tolerance


def demand_of(signals: Signals, p: "AutoscalerPolicy", tokens: float) -> float:
    """Concurrency the service holds: on the engines, held in the gateway, and overflowed (Little's law);
    or its prompt tokens' worth (`tokens`, from token_demand), when that is more."""
    held = signals.total_running + signals.total_waiting + signals.held + \
        signals.overflow_rate * service_time(signals, p.assumed_request_s)
    return max(held, tokens)


def sizing_of(signals: Signals, p: AutoscalerPolicy, allow: float, tokens: float) -> float:
    """Concurrency the local pool must hold: all demand, or with an overflow budget the engines' load up to
    their ready capacity plus the concurrency that wanted the overflow API beyond the allowed share."""
    service_s = service_time(signals, p.assumed_request_s)
    if allow == 0:
        return demand_of(signals, p, tokens)
    local = min(signals.total_running + signals.total_waiting, signals.ready * p.per_replica)
    excess = excess_overflow_rate(signals, allow) * service_s
    return max(local + signals.held + excess, tokens)


def weighed(demand: float, signals: Signals, p: AutoscalerPolicy) -> float:
    """`demand` with each capped class counted only up to its cap (classes.weighed_demand)."""
    if not p.class_caps:
        return demand
    return weighed_demand(demand, signals.class_in_flight, dict(p.class_caps), p.per_replica)


def short_of_slo(signals: Signals, p: AutoscalerPolicy, replicas: int, z: float) -> str | None:
    """Why attainment is below target by more than `z` standard errors of sampling noise, or None. Where the gateways
    measure classes' attainment (TTFT and TPOT), a class short of it that may grow the pool past `replicas`
    (classes.short_class); otherwise the engines' attainment (TTFT and TPOT) over the requests finished in the
    window."""
    if measured(signals.class_slo):
        short = short_class(signals.class_slo, dict(p.class_caps), replicas, p.slo_attainment, z)
        return None if short is None else f"class {short[0]} SLO attainment {short[1]:.3f}"
    if signals.attainment is None:
        return None
    n = signals.finished_rate * signals.window_s
    if not below_target(signals.attainment, n, p.slo_attainment, z):
        return None
    return f"SLO attainment {signals.attainment:.3f}"


def decide(state: ScalerState, signals: Signals, policy: AutoscalerPolicy, now: float) -> ScaleDecision:
    p, cur = policy, state.replicas
    st = replace(state, spent=spend(state.spent, signals, p.overflow_budget_window_s, now))
    allow = allowed_share(st.spent, p.overflow_share, p.priority)
    signals = replace(signals, attainment=service_attainment(signals, allow))
    prompts = state.prompts
    if signals.window_s > 0:  # the first tick has no window yet
        prompts = remember(prompts, now, (signals.window_s, signals.prompt_token_rate * signals.window_s),
                           p.scale_up_window_seconds)
    tokens = token_demand([v for _, v in prompts], p)
    held = weighed(demand_of(signals, p, 0.0), signals, p)  # in requests: prompt tokens hold on their own
    demand = max(held, tokens)
    busy = demand > 0 or signals.arrival_rate > 0
    last_busy = now if busy else state.last_busy
    keep = max(p.scale_down_stabilization_seconds, p.scale_up_window_seconds)
    since = now if state.observed_since is None else state.observed_since
    must_hold = weighed(sizing_of(signals, p, allow, tokens), signals, p)  # what the pool must hold now
    st = replace(st, history=remember(state.history, now, held, keep), last_busy=last_busy, observed_since=since,
                 prompts=prompts, sizing=remember(state.sizing, now, must_hold, p.scale_up_window_seconds),
                 tokens=remember(state.tokens, now, tokens,
                                 max(p.scale_up_window_seconds, p.token_stabilization_s)),
                 kv=remember(state.kv, now, sum(signals.kv_usage), p.scale_up_window_seconds),
                 needed=remember(state.needed, now, signals.replicas_needed, p.token_stabilization_s))
    idle_s = math.inf if last_busy is None else now - last_busy
    floor = max(p.replicas_min, 1)
    if p.replicas_min == 0 and p.scale_to_zero_after_seconds is not None and idle_s >= p.scale_to_zero_after_seconds:
        floor = 0

    recent = window(st.sizing, now, p.scale_up_window_seconds)
    held_avg = sum(recent) / len(recent)
    # With an overflow budget prompt tokens add no replica on their own: the gateway overflows what a burst's
    # prefill cannot meet, which the sizing counts beyond the allowed share, and the replicas-needed hold keeps what
    # the bursts needed (_scale_down). They still count in the sizing and for panic.
    token_peak = 0.0 if p.overflow_share > 0 else max(window(st.tokens, now, p.scale_up_window_seconds))
    avg = max(held_avg, token_peak)
    kv_recent = window(st.kv, now, p.scale_up_window_seconds)
    kv_level = sum(kv_recent) / len(kv_recent)
    kv_need = math.ceil(kv_level / p.kv_cache_target)
    # Requests in flight just over the pool's target are noise a replica would not fix (it flaps); prompt tokens are
    # sized with headroom already and a burst cannot wait.
    tolerated = held_avg <= cur * p.per_replica * (1 + p.scale_up_tolerance) and token_peak <= cur * p.per_replica
    want = max(cur if tolerated else math.ceil(avg / p.per_replica), kv_need)
    reason = f"demand {avg:.1f} / target {p.per_replica:g} per replica"
    if allow > 0:
        reason += f" (overflow allowed {allow:.1%} of requests)"
    if kv_need > math.ceil(avg / p.per_replica):
        reason = f"KV usage {kv_level:.2f} / target {p.kv_cache_target:g} per replica"
    served = remember(state.served, now, (signals.total_running, signals.finished_rate),
                      p.scale_down_stabilization_seconds)
    prewarm = foreseen(signals, p, allow, [v for _, v in served])
    st = replace(st, served=served,
                 foreseen=remember(state.foreseen, now, prewarm, p.scale_down_stabilization_seconds))
    if prewarm > want:
        want, reason = prewarm, f"history expects {signals.expected_arrival_rate:.2f} req/s within " \
                                f"{p.forecast_lead_seconds:g} s"
    # With an overflow budget the gateway absorbs engine queues by overflowing: a shortage is requests held
    # or overflowed (or kept from it) beyond the allowed share, not a transient queue on the engines.
    excess = excess_overflow_rate(signals, allow)
    queued = signals.held + excess + signals.total_waiting
    if allow > 0:  # a replica's worth of concurrency beyond the allowed share
        queued = signals.held + excess * service_time(signals, p.assumed_request_s) - p.per_replica
    # Requests the gateway kept from overflowing (its share spent, priority budget) are a shortage as they come. A
    # class's misses, measured at the gateways over the requests kept local too, count while the engines queue: the
    # budget absorbs queues only for the requests it sends away.
    short = short_of_slo(signals, p, cur, p.slo_noise_z)
    pressed = queued > 0 or signals.declined_rate > 0 or (measured(signals.class_slo) and signals.total_waiting > 0)
    if short and pressed and signals.starting == 0 and want <= cur:
        want, reason = cur + 1, f"{short} < {p.slo_attainment:g} while queued"
        st = replace(st, slo_hold_until=now + p.scale_down_stabilization_seconds)

    capacity = signals.ready * p.per_replica
    # With an overflow budget a spike the gateway overflows within the allowed share is no shortage.
    if demand > 0 and (signals.ready == 0 or must_hold >= p.panic_threshold * capacity):
        # Spike or scale-from-zero: jump straight to what the pool must hold now.
        need = max(math.ceil(must_hold / p.per_replica), 1, want)
        st = replace(st, panic_until=now + p.panic_hold_seconds)
        new = min(max(need, cur, floor), p.replicas_max)
        return scaled(st, now, new, f"panic: demand {must_hold:.1f} >= {p.panic_threshold:g}x capacity "
                                             f"of {signals.ready} ready replicas")

    if want > cur:
        new = min(want, cur + p.max_scale_up_step, p.replicas_max)
        return scaled(st, now, max(new, floor), f"scale up: {reason}")
    if cur < floor:
        return scaled(st, now, min(floor, p.replicas_max), "raise to minimum")
    if cur > p.replicas_max:
        return scaled(st, now, p.replicas_max, "lower to maximum")
    if cur == floor:
        return scaled(st, now, cur, "at minimum")
    return _scale_down(st, signals, p, now, floor, allow, held_avg, kv_level)


def _fitting(history: list[float], p: AutoscalerPolicy, allow: float) -> tuple[int, str]:
    """Smallest pool for the recent demand: its peak at scale_down_utilization of capacity, or with an
    overflow budget the pool whose predicted overflow (demand above its target) stays within the allowed share."""
    peak = max(history)
    if allow == 0:
        return math.ceil(peak / (p.per_replica * p.scale_down_utilization)), f"peak demand {peak:.1f}"
    total = sum(history)
    n = 0
    while sum(max(0.0, d - n * p.per_replica) for d in history) > allow * total:
        n += 1
    return n, f"demand up to {peak:.1f} with {allow:.1%} overflow"


def _scale_down(st: ScalerState, signals: Signals, p: AutoscalerPolicy, now: float, floor: int,
                allow: float, sizing_avg: float, kv_level: float) -> ScaleDecision:
    """sizing_avg, kv_level: what the scale-up rule averaged over its window (decide)."""
    cur = st.replicas
    if now < st.panic_until:
        return scaled(st, now, cur, "panic mode blocks scale-down")
    if now < st.slo_hold_until:
        return scaled(st, now, cur, "a replica SLO feedback added is held for the stabilization window")
    short = short_of_slo(signals, p, cur - 1, 0.0)  # a class capped below the current pool does not hold it
    if short:
        return scaled(st, now, cur, f"{short} below target")
    if now - st.observed_since < p.scale_down_stabilization_seconds:
        return scaled(st, now, cur, "not yet observed for a stabilization window")
    if st.last_scale_time is not None and now - st.last_scale_time < p.scale_down_interval_seconds:
        return scaled(st, now, cur, "waiting to observe the last change")
    fits, what = _fitting(window(st.history, now, p.scale_down_stabilization_seconds), p, allow)
    what += f" over {p.scale_down_stabilization_seconds:g} s"
    # Prompt tokens come in bursts shorter than a cold start: keep what the last bursts needed for longer. With an
    # overflow budget, as long as one replica fewer would have overflowed more than the allowed share then; without
    # (or with no prediction from the gateway), as long as the peak token demand does not fit the smaller pool.
    smaller = overflow_if(window(st.needed, now, p.token_stabilization_s), cur - 1) if allow > 0 else None
    if smaller is not None:
        if smaller > allow and fits < cur:
            fits, what = cur, f"{cur - 1} replicas would have overflowed {smaller:.1%} of requests over " \
                              f"{p.token_stabilization_s:g} s"
    else:
        token_peak = max(window(st.tokens, now, p.token_stabilization_s))
        token_fits = math.ceil(token_peak / (p.per_replica * p.scale_down_utilization))
        if token_fits > fits:
            fits, what = token_fits, f"prompt tokens up to {token_peak:.1f} over {p.token_stabilization_s:g} s"
    # KV usage averaged as for a scale-up, or one tick's dip flaps.
    fits = max(fits, math.ceil(kv_level / (p.kv_cache_target * p.scale_down_utilization)))
    # Never to a pool the scale-up rule would grow right back: the sizing it averages must fit within its tolerance.
    back = math.ceil(sizing_avg / (p.per_replica * (1 + p.scale_up_tolerance)))
    if back > fits:
        fits, what = back, f"sizing {sizing_avg:.1f} over {p.scale_up_window_seconds:g} s"
    # A recurring peak within a cold start keeps its pool: what the history expected over the stabilization window,
    # or the count flaps as the expectation moves.
    prewarm = max(window(st.foreseen, now, p.scale_down_stabilization_seconds))
    if prewarm > fits:
        fits, what = prewarm, f"the history's expectation over {p.scale_down_stabilization_seconds:g} s"
    new = max(fits, cur - p.max_scale_down_step, floor)
    if new >= cur:
        return scaled(st, now, cur, f"{what} needs {fits} replicas")
    if new == 0:
        return scaled(st, now, 0, f"idle for {p.scale_to_zero_after_seconds:g} s: scale to zero")
    return scaled(st, now, new, f"scale down: {what} fits {fits} replicas")
