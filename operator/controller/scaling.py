"""One autoscaler tick as a pure function, shared by the operator's timer and `floodway up`: the spec's
policy, signals from two scrapes, and the autoscaler's decide()."""

from dataclasses import dataclass

from floodway.operator.autoscaler.policy import TARGET_BATCH_SHARE, AutoscalerPolicy, Decision, ScalerState, decide
from floodway.operator.autoscaler.signals import Scrape, Signals, signals_between
from floodway.operator.spec import InferenceServiceSpec


def autoscaler_policy(spec: InferenceServiceSpec) -> AutoscalerPolicy:
    a = spec.autoscaling
    return AutoscalerPolicy(
        min_replicas=spec.replicas.min, max_replicas=spec.replicas.max, interval_s=a.interval_seconds,
        target_concurrency=a.target_concurrency or TARGET_BATCH_SHARE * spec.engine.max_num_seqs,
        kv_target=a.kv_cache_target, slo_attainment=spec.slo.attainment,
        scale_up_window_s=a.scale_up_window_seconds, max_step_up=a.max_scale_up_step,
        panic_threshold=a.panic_threshold, panic_hold_s=a.panic_hold_seconds,
        scale_down_stabilization_s=a.scale_down_stabilization_seconds,
        scale_down_utilization=a.scale_down_utilization, max_step_down=a.max_scale_down_step,
        scale_down_interval_s=a.scale_down_interval_seconds,
        scale_to_zero_after_s=a.scale_to_zero_after_seconds, slo_noise_z=a.slo_noise_z,
        prefill_tokens_per_s=a.prefill_tokens_per_second, decode_sequences=a.decode_sequences,
        ttft_slo_s=spec.slo.ttft_ms / 1000.0,
        overflow_share=a.overflow_share if spec.overflow.enabled else 0.0)  # a budget only where overflow exists


def instant_signals(scrape: Scrape) -> Signals:
    """Signals from a single scrape (the first tick): gauges only, no rates yet."""
    engines = list(scrape.engines.values())
    return Signals(ready=len(engines), starting=scrape.starting, running=tuple(e.running for e in engines),
                   waiting=tuple(e.waiting for e in engines), kv_usage=tuple(e.kv_usage for e in engines),
                   held=scrape.gateway.held if scrape.gateway else 0.0)


@dataclass(frozen=True)
class Tick:
    decision: Decision
    signals: Signals


def tick(spec: InferenceServiceSpec, state: ScalerState, previous: Scrape | None, scrape: Scrape,
         now: float) -> Tick:
    """The autoscaler's decision for this tick; with autoscaling off the service holds replicas.min, with mode
    external it follows replicas.count (set by HPA or KEDA through the scale subresource)."""
    if previous is not None and scrape.time > previous.time:
        signals = signals_between(previous, scrape, spec.slo.ttft_ms / 1000.0, spec.slo.tpot_ms / 1000.0)
    else:
        signals = instant_signals(scrape)
    if not spec.autoscaling.enabled:
        fixed = spec.replicas.min
        return Tick(Decision(fixed, "autoscaling disabled: replicas.min", ScalerState(replicas=fixed)), signals)
    if spec.autoscaling.mode == "external":
        wanted = spec.replicas.clamp(spec.replicas.count)
        return Tick(Decision(wanted, f"autoscaling.mode external: replicas.count {spec.replicas.count}",
                             ScalerState(replicas=wanted)), signals)
    return Tick(decide(state, signals, autoscaler_policy(spec), now), signals)


def initial_state(current_replicas: int | None, spec: InferenceServiceSpec) -> ScalerState:
    """State after an operator (re)start: the replica count that exists, within the spec's bounds."""
    replicas = spec.replicas.min if current_replicas is None else current_replicas
    return ScalerState(replicas=spec.replicas.clamp(replicas))
