"""The control loop's step, shared by the operator's timer (controller/handlers.py) and `floodway up`
(local/runner.py): a scrape of the engines' and gateway's /metrics -> signals -> the autoscaler's tick ->
the status. Pure but for the traffic history each tick adds to (LoopState.history, which the operator persists): the
shells scrape, act on the decision (a Deployment's replicas, local processes), and publish the status this returns."""

import dataclasses
from dataclasses import dataclass, field

from floodway.operator.autoscaler.history import History
from floodway.operator.autoscaler.policy import ScaleDecision, ScalerState
from floodway.operator.autoscaler.signals import Scrape, Signals
from floodway.operator.controller.scaling import initial_state, tick
from floodway.operator.controller.status import Observation, build_status
from floodway.operator.spec import InferenceServiceSpec


@dataclass(frozen=True)
class LoopState:
    """What one service's loop carries from one tick to the next."""

    scaler: ScalerState
    previous: Scrape | None = None  # the last tick's scrape: rates are taken between it and the next
    history: History = field(default_factory=History)  # the service's traffic, added to by each tick


def first_state(current_replicas: int | None, spec: InferenceServiceSpec, history: History | None = None) -> LoopState:
    """After a (re)start: the replica count that exists (None: none yet), within the spec's bounds, and the history
    saved before it (None: a new one)."""
    return LoopState(initial_state(current_replicas, spec), history=history or History())


@dataclass(frozen=True)
class Step:
    decision: ScaleDecision
    signals: Signals
    before: int  # the replica count wanted before this tick
    state: LoopState  # for the next tick, once the shell has acted on the decision

    @property
    def moved(self) -> bool:
        return self.decision.replicas != self.before


def step(spec: InferenceServiceSpec, state: LoopState, scrape: Scrape, now: float) -> Step:
    """This tick's decision and signals from a scrape taken at `now` (seconds, the shell's wall clock)."""
    t = tick(spec, state.scaler, state.previous, scrape, now, state.history)
    return Step(t.decision, t.signals, state.scaler.replicas, LoopState(t.decision.state, scrape, state.history))


def tick_status(spec: InferenceServiceSpec, s: Step, seen: Observation, previous: dict, now: str,
                generation: int | None, selector: str, url: str) -> dict:
    """The status after a tick: what the shell saw (replica counts, gateway, pods, claims) with the step's
    decision, signals and history; the last scale's reason and time stay until the count moves again."""
    obs = dataclasses.replace(
        seen, desired_replicas=s.decision.replicas, signals=s.signals, spend=s.decision.state.spent,
        scale_reason=s.decision.reason if s.moved else previous.get("lastScaleReason"),
        scaled_at=now if s.moved else previous.get("lastScaleTime"), history=s.state.history)
    return build_status(spec, previous, obs, now, generation, selector, url)
