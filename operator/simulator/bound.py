"""Replica schedules fixed in advance: the least replica-hours any of them needs to meet the targets on a trace, as
the bound a policy is judged by.

A schedule fixes the desired replica count per time span; the simulator still applies the cold start, the gateway's
overflow rule and the replica model, as for every policy. The families swept: a pool one or two replicas below
static peak with the drops placed by hand; pools that follow the trace's future arrival rate at a fixed rate per
replica, asked for a cold start ahead; every flat pool up to static peak, from none (every request to the overflow
API); and pools sized on the busiest spans of prompt tokens (`token_pool`), once a cold start ahead and once
reacting to the past only. Most know the future, so their least replica-hours bounds what a policy could reach; the
flat and reactive ones belong there too, as a bound that any of them beats is no bound. The reactive ones' least
(`REACTIVE`) tells a target only foresight meets apart from one reacting meets too.
Run: `python -P -m floodway.operator.simulator.bound [scenario] [--compress F] [--seed N]
[--waiting-includes-prefill] [--no-prefill-backlog-ttft] [--overflow-ttft-factor X] [--gpu-price-per-hour P]
[--api-price-in P] [--api-price-out P] [--families near-peak,following,flat,tokens] [--static-peak N]`; with prices
it also prints the cheapest schedule in dollars.
"""

import itertools
import math
import sys
from dataclasses import dataclass

from floodway.operator.autoscaler.policy import ScaleDecision, ScalerState, scaled
from floodway.operator.simulator.compare import overflow_enabled, size
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, simulate
from floodway.operator.simulator.report import Summary, summarize
from floodway.operator.simulator.traces import TraceRequest, per_span, rate_stats

ATTAINMENT, MAX_OVERFLOW, TARGET_SHARE = 0.99, 0.05, 0.70  # issue 6's Done-when


@dataclass(frozen=True)
class Schedule:
    """Desired replicas: counts[i] from starts_s[i] (ascending, starting at 0) until the next start."""

    starts_s: tuple[float, ...]
    counts: tuple[int, ...]
    interval_seconds: float = 5.0

    def __post_init__(self):
        if not self.starts_s or self.starts_s[0] != 0 or len(self.starts_s) != len(self.counts) \
                or list(self.starts_s) != sorted(self.starts_s) or min(self.counts) < 0:
            raise ValueError("a schedule needs ascending starts from 0 and one count >= 0 per start")

    def at(self, now: float) -> int:
        return next(c for s, c in zip(reversed(self.starts_s), reversed(self.counts), strict=True) if now >= s)


def decide_schedule(state: ScalerState, signals, policy: Schedule, now: float) -> ScaleDecision:
    return scaled(state, now, policy.at(now), "schedule")


def run_schedule(trace: list[TraceRequest], schedule: Schedule, cfg: SimConfig) -> Summary:
    """One schedule with overflow on (cold starts and the gateway as configured)."""
    return summarize(simulate(trace, Scaler("schedule", decide_schedule, schedule, schedule.at(0.0)),
                              overflow_enabled(cfg, True)))


def following(trace: list[TraceRequest], per_replica_rps: float, window_s: float, lead_s: float) -> Schedule:
    """A pool sized for the arrival rate of each `window_s` span at `per_replica_rps` (at least one replica),
    asked for `lead_s` ahead: the count at t is the largest need of the spans starting in [t, t + lead_s]."""
    if per_replica_rps <= 0 or window_s <= 0 or lead_s < 0:
        raise ValueError("following needs a rate per replica > 0, a window > 0 and a lead >= 0")
    need = [max(1, math.ceil(c / window_s / per_replica_rps)) for c in per_span(trace, window_s)]
    ahead = math.ceil(lead_s / window_s)
    want = [max(need[i:i + ahead + 1]) for i in range(len(need))]
    starts = [i * window_s for i in range(len(need)) if i == 0 or want[i] != want[i - 1]]
    return Schedule(tuple(starts), tuple(want[int(s // window_s)] for s in starts))


def near_peak(peak: int, end_s: float) -> list[tuple[str, Schedule]]:
    """One or two replicas below static peak: peak - 2 for the first minutes and/or from a late drop."""
    out, end_min = [], end_s / 60.0
    for low_until in (0.0, 1.0, 2.0):
        for drop_at in (end_min * f for f in (0.7, 0.75, 0.8, 0.85, 0.9, 2.0)):
            starts = [0.0] + ([low_until * 60] if low_until else []) + ([drop_at * 60] if drop_at < end_min else [])
            counts = ([peak - 2] if low_until else []) + [peak - 1] + ([peak - 2] if drop_at < end_min else [])
            if min(counts) < 1 or (low_until and drop_at <= low_until):
                continue
            name = (f"{peak - 2} until {low_until:g} min, " if low_until else "") + f"{peak - 1}" + \
                (f", {peak - 2} from {drop_at:.1f} min" if drop_at < end_min else "")
            out.append((name, Schedule(tuple(starts), tuple(counts))))
    return out


def rate_following(trace: list[TraceRequest], peak: int, lead_s: float) -> list[tuple[str, Schedule]]:
    """Rate-following pools at 0.8x..1.6x the static peak's rate per replica, 30-120 s spans."""
    base = rate_stats(trace, 60.0)[1] / peak
    out = []
    for window_s in (30.0, 60.0, 120.0):
        for k in range(9):
            rps = base * (0.8 + 0.1 * k)
            out.append((f"follow {rps:.2f} req/s per replica, {window_s:g} s spans", following(trace, rps, window_s,
                                                                                               lead_s)))
    return out


def token_pool(trace: list[TraceRequest], span_s: float, tokens_per_replica_s: float, hold_s: float, floor: int,
               first: int | None = None, lead_s: float = 0.0, interval_seconds: float = 5.0) -> Schedule:
    """Every `interval_seconds`, the pool that the busiest `span_s` span of prompt tokens ending within (t - hold_s,
    t + lead_s] needs at `tokens_per_replica_s` per replica, at least `floor`; `first` at 0 (None: that need).
    With no lead it sees only the past (the spans it has seen whole) and answers a burst a cold start late, as any
    policy must; with a cold start's lead it is clairvoyant: the pool is ready when the burst comes."""
    if span_s <= 0 or tokens_per_replica_s <= 0 or hold_s < 0 or lead_s < 0 or floor < 0 or (first or 0) < 0:
        raise ValueError("a token pool needs a span > 0, a rate per replica > 0, a hold and lead >= 0, counts >= 0")
    end = trace[-1].arrival_s
    need = [math.ceil(t / span_s / tokens_per_replica_s) for t in per_span(trace, span_s, lambda r: r.prompt_tokens)]
    starts, counts, t = [], [], 0.0
    while t <= end:
        count = max([floor, *need[max(0, int((t - hold_s) // span_s)):int((t + lead_s) // span_s)]])
        if t == 0 and first is not None:
            count = first
        if not counts or count != counts[-1]:
            starts.append(t)
            counts.append(count)
        t += interval_seconds
    return Schedule(tuple(starts), tuple(counts), interval_seconds)


TOKEN_GRID = dict(span_s=(5.0, 60.0), share=(0.4, 0.6, 0.8), hold_s=(60.0, 600.0), floor=(1, 2, 3))
REACTIVE = "reactive: "  # names the schedules that see only the past


def flat_pools(peak: int) -> list[tuple[str, Schedule]]:
    """Every flat pool up to static peak, from none at all (every request to the overflow API: priced, often the
    cheapest schedule where traffic is mostly idle)."""
    return [(f"flat {n}", Schedule((0.0,), (n,))) for n in range(0, peak + 1)]


def token_pools(trace: list[TraceRequest], prefill_tokens_per_s: float, first: int,
                lead_s: float) -> list[tuple[str, Schedule]]:
    """Pools sized on prompt tokens (TOKEN_GRID: spans, shares of a replica's prefill rate, holds, floors), each
    once reacting to the past from `first` (the count every policy starts with) and once a cold start ahead."""
    out, g = [], TOKEN_GRID
    for span, share, hold, floor in itertools.product(g["span_s"], g["share"], g["hold_s"], g["floor"]):
        name = f"busiest {span:g} s of prompt tokens at {share:g} x prefill, held {hold:g} s, floor {floor}"
        rate = share * prefill_tokens_per_s
        out.append((REACTIVE + name, token_pool(trace, span, rate, hold, floor, max(first, floor))))
        out.append((f"{name}, {lead_s:g} s ahead", token_pool(trace, span, rate, hold, floor, None, lead_s)))
    return out


def meets(s: Summary, share: float) -> bool:
    return s.attainment >= ATTAINMENT and s.overflow_share <= MAX_OVERFLOW and share <= TARGET_SHARE


FAMILIES = ("near-peak", "following", "flat", "tokens")


def schedules(trace: list[TraceRequest], peak: int, lead_s: float, prefill_tokens_per_s: float,
              first: int, families: tuple[str, ...] = FAMILIES) -> list[tuple[str, Schedule]]:
    """The schedules of the families named (FAMILIES: all; a multi-day trace runs minutes per schedule, and
    rate-following is the family that tracks a daily pattern)."""
    made = {"near-peak": lambda: near_peak(peak, trace[-1].arrival_s),
            "following": lambda: rate_following(trace, peak, lead_s), "flat": lambda: flat_pools(peak),
            "tokens": lambda: token_pools(trace, prefill_tokens_per_s, first, lead_s)}
    return [s for f in families for s in made[f]()]


def serves(s: Summary) -> bool:
    """>= 99% attainment with <= 5% overflow."""
    return s.attainment >= ATTAINMENT and s.overflow_share <= MAX_OVERFLOW


def best_schedule(results: list[tuple[str, Summary]]) -> tuple[str, Summary] | None:
    """The schedule with the least replica-hours at >= 99% attainment and <= 5% overflow, or None."""
    ok = [(n, s) for n, s in results if serves(s)]
    return min(ok, key=lambda x: x[1].replica_hours, default=None)


def cheapest_schedule(results: list[tuple[str, Summary]]) -> tuple[str, Summary] | None:
    """The schedule with the least total dollars (GPU-hours plus overflowed tokens, at the config's prices) at
    >= 99% attainment, whatever its overflow: priced, overflow is a cost like replica-hours, not a limit. None
    where no schedule meets the SLO or the prices are not both known (a total of one part would favour it)."""
    ok = [(n, s) for n, s in results if s.attainment >= ATTAINMENT and s.spend is not None
          and s.spend.self_hosted is not None and s.spend.overflow is not None]
    return min(ok, key=lambda x: x[1].spend.total, default=None)


def main(argv: list[str]) -> None:
    import argparse

    from floodway.operator.simulator.run import Options, prepare

    ap = argparse.ArgumentParser(prog="python -P -m floodway.operator.simulator.bound")
    ap.add_argument("scenario", nargs="?", default="azure-4x")
    ap.add_argument("--compress", type=float, help="replay the trace this many times faster (default: the scenario's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--waiting-includes-prefill", action="store_true")
    ap.add_argument("--no-prefill-backlog-ttft", action="store_true")
    ap.add_argument("--overflow-ttft-factor", type=float)
    ap.add_argument("--gpu-price-per-hour", type=float)
    ap.add_argument("--api-price-in", type=float)
    ap.add_argument("--api-price-out", type=float)
    ap.add_argument("--families", default=",".join(FAMILIES), help="schedule families, of " + ", ".join(FAMILIES))
    ap.add_argument("--static-peak", type=int, help="static peak's replicas (default: searched by simulation)")
    a = ap.parse_args(argv)
    families = tuple(a.families.split(","))
    if not set(families) <= set(FAMILIES):
        ap.error(f"--families: choose from {', '.join(FAMILIES)}")
    opts = Options(scenario=a.scenario, compress=a.compress, seed=a.seed,
                   waiting_includes_prefill=a.waiting_includes_prefill, overflow_ttft_factor=a.overflow_ttft_factor,
                   ttft_from_prefill_backlog=not a.no_prefill_backlog_ttft, gpu_price_per_hour=a.gpu_price_per_hour,
                   api_price_in=a.api_price_in, api_price_out=a.api_price_out)
    trace, cfg, ours, _, title = prepare(opts)
    sizing = size(trace, cfg, ours.slo_attainment, a.static_peak)
    peak_hours = sizing.static_peak * trace[-1].arrival_s / 3600.0
    title = f"{a.scenario} with --compress {a.compress:g}" if a.compress else title
    print(f"{title}: {trace[-1].arrival_s / 60:.1f} min, "
          f"static peak {sizing.static_peak} replicas ({peak_hours:.3f} replica-hours)")
    print("| schedule | SLO attainment | overflow | replica-hours | vs static peak |\n|---|---|---|---|---|")
    results = []
    for name, schedule in schedules(trace, sizing.static_peak, cfg.cold_start_s, cfg.profile.prefill_tokens_per_s,
                                    sizing.initial, families):
        s = run_schedule(trace, schedule, cfg)
        results.append((name, s))
        share = s.replica_hours / peak_hours
        print(f"| {name} | {s.attainment:.2%} | {s.overflow_share:.2%} | {s.replica_hours:.3f} | {share:.1%}"
              f"{' (meets)' if meets(s, share) else ''} |")
    cheapest = cheapest_schedule(results)
    print("least dollars at >= 99% attainment (any overflow): " +
          (f"${cheapest[1].spend.per_1k()[2]:.3f} per 1k requests, {cheapest[1].overflow_share:.1%} overflow "
           f"({cheapest[0]})" if cheapest else "none (no schedule meets 99%, or no GPU and API prices: see "
                                               "floodway simulate --help)"))
    for what, best in (("", best_schedule(results)),
                       (", reacting to the past", best_schedule([r for r in results if r[0].startswith(REACTIVE)]))):
        print(f"least replica-hours at >= 99% attainment and <= 5% overflow{what}: " +
              (f"{best[1].replica_hours:.3f}, {best[1].replica_hours / peak_hours:.1%} of static peak ({best[0]})"
               if best else "none of these schedules"))


if __name__ == "__main__":
    main(sys.argv[1:])
