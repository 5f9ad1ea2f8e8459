"""Autoscaling signals from Prometheus text (engines' and the gateway's /metrics), as plain data.

A scrape of each engine gives gauges (running, waiting, KV usage) and cumulative histograms (TTFT, TPOT or
inter-token latency); two scrapes `window_s` apart give rates and the SLO attainment from bucket deltas.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from floodway.operator.runtimes import DEFAULT, RUNTIMES, MetricNames
from prometheus_client.parser import text_string_to_metric_families

# Gateway metrics (operator/gateway/metrics.py) this module reads.
GW_REQUESTS = "floodway_gateway_requests_total"  # attempts by backend and outcome; "retried" ones are re-sent
GW_OVERFLOW = "floodway_gateway_overflow_total"  # requests sent to the overflow API, by trigger
GW_HELD = "floodway_gateway_hold_queue_depth"  # requests held in the gateway's queue now
GW_NEEDED = "floodway_gateway_replicas_needed"  # requests by the pool that would have kept them local
GW_TOKENS = "floodway_gateway_request_tokens_total"  # estimated tokens of the requests arrived
GW_OVERFLOW_TOKENS = "floodway_gateway_overflow_tokens_total"  # estimated tokens of the requests overflowed
GW_DECLINED = "floodway_gateway_overflow_declined_total"  # requests kept from overflowing: the share was spent
GW_CLASS_IN_FLIGHT = "floodway_gateway_class_in_flight"  # requests of each class not yet over
GW_CLASS_TTFT_MET = "floodway_gateway_class_ttft_slo_met_total"  # streamed answers within their class's TTFT SLO
GW_CLASS_TTFT_MEASURED = "floodway_gateway_class_ttft_measured_total"  # streamed answers measured, by class
GW_CLASS_TPOT_MET = "floodway_gateway_class_tpot_slo_met_total"  # streamed answers within their class's TPOT SLO
GW_CLASS_TPOT_MEASURED = "floodway_gateway_class_tpot_measured_total"  # streamed answers ended whole, by class
# ClassCounts' fields: each one's (within the SLO, measured) counters.
GW_CLASS_SLO = {"ttft": (GW_CLASS_TTFT_MET, GW_CLASS_TTFT_MEASURED),
                "tpot": (GW_CLASS_TPOT_MET, GW_CLASS_TPOT_MEASURED)}
PROMPT_TOKENS = "vllm:prompt_tokens_total"  # prompt tokens the engine received (vLLM and ours)


def both_met(ttft: tuple[float, float], tpot: tuple[float, float]) -> float | None:
    """The share of answers meeting both SLOs from each SLO's (within, measured) counts; None: no TTFT measured.
    The counts do not say which answers missed which SLO; a_ttft + a_tpot - 1 is the least share that can have met
    both, so attainment is never overstated. No TPOT measured: TTFT's alone."""
    if ttft[1] <= 0:
        return None
    a_tpot = tpot[0] / tpot[1] if tpot[1] > 0 else 1.0
    return max(0.0, ttft[0] / ttft[1] + a_tpot - 1.0)


@dataclass(frozen=True)
class ClassCounts:
    """One SLO class's streamed answers as the gateways count them, each SLO as (within it, measured): TTFT at the
    first token, TPOT (the mean gap between events) when the answer ended whole. Cumulative in a GatewaySample, over
    the window in Signals."""

    ttft: tuple[float, float] = (0.0, 0.0)
    tpot: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def answer(cls, ttft_met: bool, tpot_met: bool | None) -> "ClassCounts":
        """One answer's counts; tpot_met None: its TPOT not measured (fewer than two tokens)."""
        return cls((float(ttft_met), 1.0), (0.0, 0.0) if tpot_met is None else (float(tpot_met), 1.0))

    def _each(self, op, other: "ClassCounts") -> "ClassCounts":
        """op(ours, other's) on each SLO's (within, measured) pair."""
        return ClassCounts(**{f.name: op(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})

    def __add__(self, other: "ClassCounts") -> "ClassCounts":
        return self._each(lambda a, b: (a[0] + b[0], a[1] + b[1]), other)

    def since(self, old: "ClassCounts") -> "ClassCounts":
        """The counts added since `old`, each SLO's pair on its own; one whose measured count went down was reset
        (the gateway restarted): everything since the reset is new."""
        return self._each(lambda new, was: new if new[1] < was[1] else (new[0] - was[0], new[1] - was[1]), old)

    @property
    def attainment(self) -> float | None:
        """The share meeting both its TTFT and TPOT SLOs (both_met); None: no TTFT measured."""
        return both_met(self.ttft, self.tpot)


@dataclass(frozen=True)
class Signals:
    """What the autoscaler sees at one tick. Per-replica tuples cover ready replicas only."""

    ready: int = 0
    starting: int = 0
    running: tuple[float, ...] = ()
    waiting: tuple[float, ...] = ()
    kv_usage: tuple[float, ...] = ()
    utilization: tuple[float, ...] = ()  # busy share of each replica's time (GPU utilisation), when known
    held: float = 0.0  # requests held in the gateway (no ready replica, overflow budget spent)
    arrival_rate: float = 0.0  # requests/s reaching the gateway over the window
    finished_rate: float = 0.0  # local requests/s finished over the window
    attainment: float | None = None  # share of finished requests meeting TTFT and TPOT SLOs; None: none finished
    goodput: float = 0.0  # finished requests/s meeting the SLO
    overflow_rate: float = 0.0  # requests/s sent to the overflow API
    # The gateway's estimated tokens (prompt plus completion)/s arriving and sent to the overflow API: the overflow
    # budget's token share.
    request_token_rate: float = 0.0
    overflow_token_rate: float = 0.0
    declined_rate: float = 0.0  # requests/s a trigger would have overflowed, kept local as the share was spent
    window_s: float = 0.0
    # Prompt tokens/s reaching the service: the engines' received, scaled up by the share that overflowed
    # (taken to have the local requests' mean prompt). Demand in tokens, which request counts miss.
    prompt_token_rate: float = 0.0
    # The requests that reached the gateway in the window by the smallest pool that would have kept them local
    # (overflow.replicas_needed), as cumulative bucket counts {pool size: requests}: what a smaller pool overflows.
    replicas_needed: Mapping[float, float] = field(default_factory=dict)
    # By SLO class (spec.classes), from the gateway: its requests in flight now, and its streamed answers' TTFT and
    # TPOT counts over the window.
    class_in_flight: Mapping[str, float] = field(default_factory=dict)
    class_slo: Mapping[str, ClassCounts] = field(default_factory=dict)
    # What the service's history expects within the next cold start (forecast.py), requests/s and prompt tokens/s;
    # 0: no expectation.
    expected_arrival_rate: float = 0.0
    expected_prompt_token_rate: float = 0.0

    @property
    def total_running(self) -> float:
        return float(sum(self.running))

    @property
    def total_waiting(self) -> float:
        return float(sum(self.waiting))


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one engine: gauges, and cumulative histograms as {upper bound: count}."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    ttft: Mapping[float, float] = field(default_factory=dict)
    tpot: Mapping[float, float] = field(default_factory=dict)
    tpot_per_request: bool = True  # False: tpot holds per-token inter-token latencies
    finished_total: float = 0.0  # vllm:request_success_total over all finish reasons
    prompt_tokens_total: float = 0.0  # vllm:prompt_tokens_total


@dataclass(frozen=True)
class GatewaySample:
    requests_total: float = 0.0
    overflow_total: float = 0.0
    held: float = 0.0
    replicas_needed: Mapping[float, float] = field(default_factory=dict)  # cumulative histogram {bound: count}
    request_tokens_total: float = 0.0
    overflow_tokens_total: float = 0.0
    declined_total: float = 0.0
    class_in_flight: Mapping[str, float] = field(default_factory=dict)
    class_slo: Mapping[str, ClassCounts] = field(default_factory=dict)  # cumulative


@dataclass(frozen=True)
class Scrape:
    """All scrapes of one service at one time. engines: replica name -> sample (ready replicas)."""

    time: float
    engines: Mapping[str, EngineSample]
    gateway: GatewaySample | None = None
    starting: int = 0


def _samples(text: str, skip=lambda labels: False, by: str | None = None
             ) -> tuple[dict[str, float], dict[str, dict[float, float]], dict[str, dict[str, float]]]:
    """Sum of each sample name over label sets (except those `skip` names), histogram buckets by bound (summed over
    label sets), and each sample name carrying label `by` summed by that label's value."""
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    labelled: dict[str, dict[str, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise ValueError(f"bad Prometheus text: {e}") from None
    for fam in families:
        for s in fam.samples:
            if skip(s.labels):
                continue
            if s.name.endswith("_bucket") and "le" in s.labels:
                b = buckets.setdefault(s.name[: -len("_bucket")], {})
                le = float(s.labels["le"])
                b[le] = b.get(le, 0.0) + s.value
            else:
                values[s.name] = values.get(s.name, 0.0) + s.value
                if by in s.labels:
                    of = labelled.setdefault(s.name, {})
                    of[s.labels[by]] = of.get(s.labels[by], 0.0) + s.value
    return values, buckets, labelled


def parse_engine(text: str, names: MetricNames = RUNTIMES[DEFAULT].metrics) -> EngineSample:
    """Parse an engine's /metrics (the runtime's `names` for our signals) into an EngineSample; missing metrics
    read as zero. Request-level TPOT when the engine exports it, otherwise per-token inter-token latency."""
    values, buckets, _ = _samples(text)

    def first(found: Mapping, candidates: tuple[str, ...], default):
        return next((found[n] for n in candidates if n in found), default)

    tpot = first(buckets, names.tpot, None)
    return EngineSample(
        running=first(values, names.running, 0.0),
        waiting=first(values, names.waiting, 0.0),
        kv_usage=first(values, names.kv_usage, 0.0),
        ttft=first(buckets, names.ttft, {}),
        tpot=tpot if tpot is not None else first(buckets, names.itl, {}),
        tpot_per_request=tpot is not None,
        finished_total=first(values, names.finished, 0.0),
        prompt_tokens_total=values.get(PROMPT_TOKENS, 0.0),
    )


def parse_gateway(text: str) -> GatewaySample:
    # A retried attempt is counted again under the backend that finally served it.
    values, buckets, by_class = _samples(text, skip=lambda labels: labels.get("outcome") == "retried", by="class")
    return GatewaySample(values.get(GW_REQUESTS, 0.0), values.get(GW_OVERFLOW, 0.0), values.get(GW_HELD, 0.0),
                         buckets.get(GW_NEEDED, {}), values.get(GW_TOKENS, 0.0), values.get(GW_OVERFLOW_TOKENS, 0.0),
                         values.get(GW_DECLINED, 0.0), by_class.get(GW_CLASS_IN_FLIGHT, {}), _class_counts(by_class))


def _class_counts(by_class: Mapping[str, Mapping[str, float]]) -> dict[str, ClassCounts]:
    """Each class's counts from the gateway's counters by class (by_class: sample name -> {class: value}), for
    every class with an SLO measured."""
    def of(name, c):
        return by_class.get(name, {}).get(c, 0.0)
    classes = {c for _, measured in GW_CLASS_SLO.values() for c in by_class.get(measured, {})}
    return {c: ClassCounts(**{k: (of(met, c), of(measured, c)) for k, (met, measured) in GW_CLASS_SLO.items()})
            for c in classes}


def _delta(new: float, old: float) -> float:
    # A counter that went down was reset (engine restart): everything since the reset is new.
    return new - old if new >= old else new


def _hist_delta(new: Mapping[float, float], old: Mapping[float, float] | None) -> dict[float, float]:
    old = old or {}
    if any(new.get(le, 0.0) < v for le, v in old.items()):
        old = {}
    return {le: new[le] - old.get(le, 0.0) for le in new}


def observe(hist: dict[float, float], value: float) -> None:
    """Count `value` in a cumulative histogram {upper bound: count}, as Prometheus does."""
    for le in hist:
        if value <= le:
            hist[le] += 1


def share_within(delta: Mapping[float, float], limit: float) -> tuple[float, float]:
    """(observations <= limit, all observations) from bucket deltas. Counts only buckets whose upper bound
    is <= limit, so the share is never overstated when the SLO falls between bucket bounds."""
    total = delta.get(math.inf, max(delta.values(), default=0.0))
    within = max((v for le, v in delta.items() if le <= limit), default=0.0)
    return within, total


def signals_between(old: Scrape, new: Scrape, ttft_slo_s: float, tpot_slo_s: float) -> Signals:
    """Signals over the window between two scrapes of the same service."""
    dt = new.time - old.time
    if dt <= 0:
        raise ValueError(f"scrapes must be in time order (window {dt:.3f} s)")
    finished = ttft_ok = ttft_all = tpot_ok = tpot_all = prompt = 0.0
    for name, eng in new.engines.items():
        prev = old.engines.get(name)
        finished += _delta(eng.finished_total, prev.finished_total if prev else 0.0)
        prompt += _delta(eng.prompt_tokens_total, prev.prompt_tokens_total if prev else 0.0)
        w, n = share_within(_hist_delta(eng.ttft, prev.ttft if prev else None), ttft_slo_s)
        ttft_all += n
        ttft_ok += w
        w, n = share_within(_hist_delta(eng.tpot, prev.tpot if prev else None), tpot_slo_s)
        tpot_ok += w
        tpot_all += n
    attainment = both_met((ttft_ok, ttft_all), (tpot_ok, tpot_all))
    gw_new, gw_old = new.gateway, old.gateway
    arrivals = overflow = tokens = overflow_tokens = declined = 0.0
    needed, class_slo = {}, {}
    if gw_new is not None:
        def rate(name):
            return _delta(getattr(gw_new, name), getattr(gw_old, name) if gw_old else 0.0)
        arrivals, overflow = rate("requests_total"), rate("overflow_total")
        tokens, overflow_tokens, declined = rate("request_tokens_total"), rate("overflow_tokens_total"), \
            rate("declined_total")
        needed = _hist_delta(gw_new.replicas_needed, gw_old.replicas_needed if gw_old else None)
        before = gw_old.class_slo if gw_old else {}
        class_slo = {c: counts.since(before.get(c, ClassCounts())) for c, counts in gw_new.class_slo.items()}
    engines = list(new.engines.values())
    return Signals(
        ready=len(engines), starting=new.starting,
        running=tuple(e.running for e in engines), waiting=tuple(e.waiting for e in engines),
        kv_usage=tuple(e.kv_usage for e in engines), held=gw_new.held if gw_new else 0.0,
        arrival_rate=arrivals / dt, finished_rate=finished / dt, attainment=attainment,
        goodput=(attainment or 0.0) * finished / dt, overflow_rate=overflow / dt, request_token_rate=tokens / dt,
        overflow_token_rate=overflow_tokens / dt, declined_rate=declined / dt, window_s=dt,
        prompt_token_rate=prompt / dt * (arrivals / (arrivals - overflow) if arrivals > overflow else 1.0),
        replicas_needed=needed, class_in_flight=dict(gw_new.class_in_flight) if gw_new else {},
        class_slo=class_slo,
    )
