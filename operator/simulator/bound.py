"""Clairvoyant replica schedules: what the best possible policy could reach on a trace, as a bound.

A schedule fixes the desired replica count per time span in advance (it knows the whole trace); the
simulator still applies the cold start, the gateway's overflow rule and the replica model, as for every
policy. Sweeping a few schedules shows the least replica-hours any policy could reach at a given overflow
share and attainment. Run: `python -P -m floodway.operator.simulator.bound [scenario] [--waiting-includes-prefill]`.
"""

import sys
from dataclasses import dataclass

from floodway.operator.autoscaler.policy import Decision, ScalerState, scaled
from floodway.operator.simulator.compare import overflow_enabled, size
from floodway.operator.simulator.des import Scaler, SimConfig, simulate
from floodway.operator.simulator.report import Summary, summarize
from floodway.operator.simulator.traces import Request


@dataclass(frozen=True)
class Schedule:
    """Desired replicas: counts[i] from starts_s[i] (ascending, starting at 0) until the next start."""

    starts_s: tuple[float, ...]
    counts: tuple[int, ...]
    interval_s: float = 5.0

    def __post_init__(self):
        if not self.starts_s or self.starts_s[0] != 0 or len(self.starts_s) != len(self.counts) \
                or list(self.starts_s) != sorted(self.starts_s) or min(self.counts) < 0:
            raise ValueError("a schedule needs ascending starts from 0 and one count >= 0 per start")

    def at(self, now: float) -> int:
        return next(c for s, c in zip(reversed(self.starts_s), reversed(self.counts), strict=True) if now >= s)


def decide_schedule(state: ScalerState, signals, policy: Schedule, now: float) -> Decision:
    return scaled(state, now, policy.at(now), "schedule")


def run_schedule(trace: list[Request], schedule: Schedule, cfg: SimConfig) -> Summary:
    """One clairvoyant schedule with overflow on (cold starts and the gateway as configured)."""
    return summarize(simulate(trace, Scaler("schedule", decide_schedule, schedule, schedule.at(0.0)),
                              overflow_enabled(cfg, True)))


def main(argv: list[str]) -> None:
    from floodway.operator.simulator.run import Options, prepare

    scenario = next((a for a in argv if not a.startswith("--")), "azure-4x")
    opts = Options(scenario=scenario, waiting_includes_prefill="--waiting-includes-prefill" in argv)
    trace, cfg, ours, _, title = prepare(opts)
    peak = size(trace, cfg, ours.slo_attainment).static_peak
    peak_hours = peak * trace[-1].arrival_s / 3600.0
    end_min = trace[-1].arrival_s / 60.0
    print(f"{title}: static peak {peak} replicas; clairvoyant schedules of {peak - 1} and {peak - 2} replicas")
    print("| schedule | SLO attainment | overflow | replica-hours | vs static peak |\n|---|---|---|---|---|")
    for low_until in (0.0, 1.0, 2.0):
        for drop_at in (end_min * f for f in (0.7, 0.75, 0.8, 0.85, 0.9, 2.0)):
            starts = [0.0] + ([low_until * 60] if low_until else []) + ([drop_at * 60] if drop_at < end_min else [])
            counts = ([peak - 2] if low_until else []) + [peak - 1] + ([peak - 2] if drop_at < end_min else [])
            s = run_schedule(trace, Schedule(tuple(starts), tuple(counts)), cfg)
            name = (f"{peak - 2} until {low_until:g} min, " if low_until else "") + f"{peak - 1}" + \
                (f", {peak - 2} from {drop_at:.1f} min" if drop_at < end_min else "")
            print(f"| {name} | {s.attainment:.2%} | {s.overflow_share:.2%} | {s.replica_hours:.3f} | "
                  f"{s.replica_hours / peak_hours:.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
