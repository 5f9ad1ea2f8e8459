"""One autoscaler tick as a pure function, shared by the operator's timer and `floodway up`: the spec's
policy, signals from two scrapes, and the autoscaler's decide()."""

import dataclasses
from dataclasses import dataclass

from floodway.operator.autoscaler.forecast import foresee
from floodway.operator.autoscaler.history import History
from floodway.operator.autoscaler.policy import (
    TARGET_BATCH_SHARE,
    AutoscalerPolicy,
    ScaleDecision,
    ScalerState,
    decide,
)
from floodway.operator.autoscaler.signals import Scrape, Signals, signals_between
from floodway.operator.spec import InferenceServiceSpec


def spec_values(spec: InferenceServiceSpec) -> dict:
    """The spec's settings the autoscaler reads, under the policy's names: autoscaling.* as they are, replicas.* and
    slo.* prefixed with their section (replicas_min, slo_ttft_ms)."""
    return {**{f"replicas_{k}": v for k, v in spec.replicas}, **{f"slo_{k}": v for k, v in spec.slo},
            **dict(spec.autoscaling)}


def autoscaler_policy(spec: InferenceServiceSpec, **changes) -> AutoscalerPolicy:
    """The policy for this spec (then `changes`): each policy field the spec has takes its value from there, with
    two rules of the spec's: targetConcurrency unset is TARGET_BATCH_SHARE of engine.maxNumSeqs, and an overflow
    budget exists only where the service overflows; class_caps are the classes' maxReplicas."""
    names = {f.name for f in dataclasses.fields(AutoscalerPolicy)}
    values = {k: v for k, v in spec_values(spec).items() if k in names}
    if values["target_concurrency"] is None:
        values["target_concurrency"] = TARGET_BATCH_SHARE * spec.engine.max_num_seqs
    if not spec.overflow.enabled:
        values["overflow_share"] = 0.0
    values["class_caps"] = tuple((c.name, c.max_replicas) for c in spec.classes if c.max_replicas is not None)
    return AutoscalerPolicy(**{**values, **changes})


DEFAULT_SPEC = InferenceServiceSpec(model="default")


def default_policy(**changes) -> AutoscalerPolicy:
    """The policy of a spec that sets nothing but its model (then `changes`): the autoscaler's defaults."""
    return autoscaler_policy(DEFAULT_SPEC, **changes)


def instant_signals(scrape: Scrape) -> Signals:
    """Signals from a single scrape (the first tick): gauges only, no rates yet."""
    engines = list(scrape.engines.values())
    return Signals(ready=len(engines), starting=scrape.starting, running=tuple(e.running for e in engines),
                   waiting=tuple(e.waiting for e in engines), kv_usage=tuple(e.kv_usage for e in engines),
                   held=scrape.gateway.held if scrape.gateway else 0.0)


@dataclass(frozen=True)
class Tick:
    decision: ScaleDecision
    signals: Signals


def tick(spec: InferenceServiceSpec, state: ScalerState, previous: Scrape | None, scrape: Scrape,
         now: float, history: History | None = None) -> Tick:
    """The autoscaler's decision for this tick; with autoscaling off the service holds replicas.min, with mode
    external it follows replicas.count (set by HPA or KEDA through the scale subresource). With a `history` and
    autoscaling.forecastLeadSeconds, the tick's arrivals are counted into it and its expectation is in the signals."""
    if previous is not None and scrape.time > previous.time:
        signals = signals_between(previous, scrape, spec.slo.ttft_ms / 1000.0, spec.slo.tpot_ms / 1000.0)
    else:
        signals = instant_signals(scrape)
    if not spec.autoscaling.enabled:
        fixed = spec.replicas.min
        return Tick(ScaleDecision(fixed, "autoscaling disabled: replicas.min", ScalerState(replicas=fixed)), signals)
    if spec.autoscaling.mode == "external":
        wanted = spec.replicas.clamp(spec.replicas.count)
        return Tick(ScaleDecision(wanted, f"autoscaling.mode external: replicas.count {spec.replicas.count}",
                             ScalerState(replicas=wanted)), signals)
    lead = spec.autoscaling.forecast_lead_seconds
    if history is not None and lead:
        signals = foresee(history, signals, now, lead)
    return Tick(decide(state, signals, autoscaler_policy(spec), now), signals)


def initial_state(current_replicas: int | None, spec: InferenceServiceSpec) -> ScalerState:
    """State after an operator (re)start: the replica count that exists, within the spec's bounds."""
    replicas = spec.replicas.min if current_replicas is None else current_replicas
    return ScalerState(replicas=spec.replicas.clamp(replicas))
