"""`floodway simulate --sweep`: our policy against the bound (bound.py) and the baselines over the trace family
(scenarios.FAMILY) and seeds, one table, with issue 15's targets checked per row (overflow in requests and in
tokens), and ours under the other autoscaling.priority beside it; with --classes, ours' attainment per class and
lost requests."""

from collections import Counter
from dataclasses import dataclass, replace

from floodway.operator.simulator import bound, compare
from floodway.operator.simulator.report import Summary, money, population, summarize
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.scenarios import FAMILY, SEEDED
from floodway.operator.spec.models import AutoscalingSpec

OURS = "floodway+overflow"
BASELINES = ("hpa", "keda", "kpa")
BOUND_FACTOR = 1.15  # replica-hours within this factor of the bound
CAPACITY_MISSES = ("overflow", "replica-hours")  # the misses a reactive schedule's figure speaks to


@dataclass(frozen=True)
class Row:
    scenario: str
    seed: int
    requests: int
    ours: Summary
    bound_hours: float | None  # None: no bound schedule met 99% with <= 5% overflow
    baselines: dict[str, Summary]
    static: tuple[int, Summary] | None = None  # static_within_budget
    # (attainment, replica-hours) of each bound schedule with <= 5% overflow (empty: not run)
    reach: tuple[tuple[float, float], ...] = ()
    reacting: float | None = None  # least replica-hours of a reactive schedule meeting 99% with <= 5% overflow
    # the reactive schedules that meet 99% with <= 5% overflow within BOUND_FACTOR x the bound
    reactive_meeting: frozenset[str] = frozenset()
    cheapest: Summary | None = None  # the bound's schedule with the least dollars at >= 99% (bound.cheapest_schedule)
    other: Summary | None = None  # ours under the other autoscaling.priority (other_priority)
    # ours per SLO class (with --classes): (class, attainment of its admitted requests, its requests lost)
    classes: tuple[tuple[str, float, int], ...] = ()

    def own_misses(self) -> list[str]:
        """The targets of our policy's own (attainment, overflow in requests and in tokens, the bound) this row
        misses."""
        o, out = self.ours, []
        if o.attainment < bound.ATTAINMENT:
            out.append(f"attainment {o.attainment:.2%}")
        if o.overflow_share > bound.MAX_OVERFLOW:
            out.append(f"overflow {o.overflow_share:.1%}")
        if o.overflow_token_share > bound.MAX_OVERFLOW:  # the budget counts tokens too (a long prompt spends more)
            out.append(f"tokens overflowed {o.overflow_token_share:.1%}")
        if self.bound_hours is None or o.replica_hours > BOUND_FACTOR * self.bound_hours:
            out.append("replica-hours vs bound")
        return out

    def misses(self) -> list[str]:
        """The targets this row misses (empty: all hold)."""
        o, out = self.ours, self.own_misses()
        for name, b in self.baselines.items():  # at least its attainment (ties at 100% count) for no more hours
            if not (o.attainment >= b.attainment and o.replica_hours <= b.replica_hours):
                out.append(f"vs {name}")
        return out

    def infeasible(self) -> dict[str, str]:
        """The "vs baseline" targets no policy can meet together with the others, by the bound's own premise (the
        schedules' least replica-hours is what any policy needs), and why: a baseline that ran on fewer
        replica-hours than the bound, or whose attainment no bound schedule with <= 5% overflow reaches on
        the replica-hours both targets leave (at most the baseline's and BOUND_FACTOR x the bound)."""
        out = {}
        if self.bound_hours is None:
            return out
        for name, b in self.baselines.items():
            hours = min(b.replica_hours, BOUND_FACTOR * self.bound_hours)
            if b.replica_hours < self.bound_hours:
                out[f"vs {name}"] = f"{name} {b.replica_hours:.2f} h < bound {self.bound_hours:.2f} h"
            elif self.reach and not any(a >= max(b.attainment, bound.ATTAINMENT) and h <= hours
                                        for a, h in self.reach):
                out[f"vs {name}"] = f"no schedule reaches {name}'s {b.attainment:.2%} on <= {hours:.2f} h"
        return out

    def dominated_by(self) -> list[str]:
        """Baselines Pareto-better than ours: at least our attainment on at most our replica-hours, and not a tie."""
        o = self.ours
        return [name for name, b in self.baselines.items()
                if b.attainment >= o.attainment and b.replica_hours <= o.replica_hours
                and (b.attainment, b.replica_hours) != (o.attainment, o.replica_hours)]

    def reacting_misses(self) -> bool:
        """Whether reacting to the past cannot meet the targets here either: no reactive schedule meets 99% with
        <= 5% overflow on at most BOUND_FACTOR x the bound."""
        return self.bound_hours is not None and (self.reacting is None
                                                 or self.reacting > BOUND_FACTOR * self.bound_hours)

    def verdict(self) -> str:
        """The targets column: "yes", or each miss, a jointly infeasible one with its reason; a miss of the overflow
        or the bound with what the best reactive schedule needs for both."""
        why = self.infeasible()
        misses = [f"{m} (jointly infeasible: {why[m]})" if m in why else m for m in self.misses()]
        if self.reacting is not None and self.bound_hours:
            note = f" (reacting to the past, both need {self.reacting / self.bound_hours:.2f}x)"
            misses = [m + note if m.startswith(CAPACITY_MISSES) else m for m in misses]
        pareto = [f"Pareto-dominated by {name}" for name in self.dominated_by()]
        return "yes" if not misses and not pareto else "no: " + ", ".join(misses + pareto)


def static_within_budget(trace, cfg, bound_hours: float | None) -> tuple[int, Summary] | None:
    """The largest static pool (warm from the start, with overflow) that costs at most BOUND_FACTOR x the bound's
    replica-hours: what holding capacity for bursts nobody can see coming buys at the cost the targets allow."""
    n = int(BOUND_FACTOR * (bound_hours or 0.0) * 3600.0 / trace[-1].arrival_s)
    return (n, bound.run_schedule(trace, bound.Schedule((0.0,), (n,)), cfg)) if n >= 1 else None


def other_priority(opts: Options) -> str:
    """The autoscaling.priority the sweep runs ours with beside the one it runs: what the other choice costs."""
    return "budget" if (opts.priority or AutoscalingSpec().priority) == "slo" else "slo"


def run_one(scenario: str, seed: int, base: Options) -> Row:
    opts = Options(**{**vars(base), "scenario": scenario, "seed": seed, "trace": None})
    trace, cfg, ours, _, _ = prepare(opts)
    sizing = compare.size(trace, cfg, ours.slo_attainment)
    _, results = compare.run(trace, [OURS, *BASELINES], cfg, ours, sizing)
    _, other_cfg, other_ours, _, _ = prepare(replace(opts, priority=other_priority(opts)))
    other = summarize(compare.run(trace, [OURS], other_cfg, other_ours, sizing)[1][0])
    sums = {r.name: summarize(r) for r in results}
    schedules = [(n, bound.run_schedule(trace, s, cfg))
                 for n, s in bound.schedules(trace, sizing.static_peak, cfg.cold_start_s,
                                             cfg.profile.prefill_tokens_per_s, sizing.initial)]
    best = bound.best_schedule(schedules)
    bound_hours = best[1].replica_hours if best else None
    reacting = bound.best_schedule([x for x in schedules if x[0].startswith(bound.REACTIVE)])
    reach = tuple((s.attainment, s.replica_hours) for _, s in schedules if s.overflow_share <= bound.MAX_OVERFLOW)
    meeting = frozenset(n for n, s in schedules if n.startswith(bound.REACTIVE) and bound_hours and bound.serves(s)
                        and s.replica_hours <= BOUND_FACTOR * bound_hours)
    cheapest = bound.cheapest_schedule(schedules)
    classes = tuple((g.name.removeprefix("class "), g.attainment, g.rejected) for g in population(results[0])
                    if g.name.startswith("class "))
    return Row(scenario, seed, len(trace), sums[OURS], bound_hours, {b: sums[b] for b in BASELINES},
               static_within_budget(trace, cfg, bound_hours), reach, reacting and reacting[1].replica_hours, meeting,
               cheapest and cheapest[1], other, classes)


def _run_one(args) -> Row:
    return run_one(*args)


def rows(base: Options, seeds=range(5), scenarios=FAMILY, jobs: int = 1):
    """The family's rows in order; `jobs` > 1 runs that many at once in worker processes (each row is independent)."""
    todo = [(sc, seed, base) for sc in scenarios for seed in (seeds if sc in SEEDED else seeds[:1])]
    if jobs <= 1:
        yield from map(_run_one, todo)
        return
    from multiprocessing import Pool

    with Pool(jobs) as pool:
        yield from pool.imap(_run_one, todo)


def render(row: Row) -> str:
    o = row.ours
    ratio = f"{o.replica_hours / row.bound_hours:.2f}x" if row.bound_hours else "no bound"
    base = " | ".join(f"{b.attainment:.1%} / {b.replica_hours:.2f}" for b in row.baselines.values())
    static = f"{row.static[0]}: {row.static[1].attainment:.1%} / {row.static[1].overflow_share:.1%}" \
        if row.static else "-"
    dollars = " / ".join(map(money, o.spend.per_1k())) if o.spend else "-"
    cheapest = row.cheapest.spend if row.cheapest else None
    if cheapest:
        dollars += f" | {money(cheapest.per_1k()[2])} ({row.cheapest.overflow_share:.1%} overflow)"
    else:
        dollars += " | -"
    a = row.other
    other = f"{a.attainment:.2%} / {a.overflow_share:.1%} / {a.overflow_token_share:.1%} / {a.replica_hours:.2f}" \
        if a else "-"
    by_class = "".join(f" {c} {a:.2%}" + (f", {lost} lost" if lost else "") + ";" for c, a, lost in row.classes)
    return (f"| {row.scenario} | {row.seed} | {row.requests} | {o.attainment:.2%} | {o.overflow_share:.1%} | "
            f"{o.overflow_token_share:.1%} | {o.replica_hours:.2f} | {dollars} | "
            f"{row.bound_hours or float('nan'):.2f} | {ratio} | {base} | {static} | {other} | {row.verdict()} |"
            + (f"{by_class.rstrip(';')} |" if row.classes else ""))


def tally(rows: list[Row]) -> str:
    """How many rows meet every target, how many every jointly feasible one, and which targets are infeasible
    where."""
    def names(rs):
        return ", ".join(f"{r.scenario} {r.seed}" for r in rs) or "none"

    def marked(r):  # ours may meet such a target anyway: the bound is a premise, not a law
        return [m if m in r.misses() else f"{m} (met)" for m in r.infeasible()]
    every = [r for r in rows if not r.misses()]
    feasible = [r for r in rows if set(r.misses()) <= set(r.infeasible())]
    blocked = [r for r in rows if r.infeasible()]
    dominated = [r for r in rows if r.dominated_by()]
    hard = [r for r in rows if r.reacting_misses() and any(m.startswith(CAPACITY_MISSES) for m in r.misses())]
    own = [r for r in rows if not r.own_misses()]
    # The one reactive schedule (the same name: the same rule) that meets the same three targets on the most rows.
    counts = Counter(n for r in rows for n in r.reactive_meeting)
    best, best_n = counts.most_common(1)[0] if counts else ("none", 0)
    return "\n".join([
        f"every target: {len(every)} of {len(rows)} rows ({names(every)})",
        f"every jointly feasible target: {len(feasible)} of {len(rows)} rows ({names(feasible)})",
        f"a target jointly infeasible: {len(blocked)} of {len(rows)} rows ("
        + ("; ".join(f"{r.scenario} {r.seed}: {', '.join(marked(r))}" for r in blocked) or "none") + ")",
        f"a baseline Pareto-better than ours: {len(dominated)} of {len(rows)} rows ({names(dominated)})",
        f"missing the overflow or the bound where no reactive schedule meets both within {BOUND_FACTOR:g}x either: "
        f"{len(hard)} of {len(rows)} rows ({names(hard)})",
        f"attainment, overflow and the bound (no baselines): ours on {len(own)} of {len(rows)} rows; the best single "
        f"reactive schedule of the bound's on {best_n} ({best.removeprefix(bound.REACTIVE)})"])


def header(base: Options) -> str:
    return ("| scenario | seed | requests | attainment | overflow | overflow tokens | replica-hours | "
            "$/1k self-hosted / overflow / total | cheapest schedule's $/1k at >= 99% | bound | vs bound | "
            + " | ".join(f"{b} att. / hours" for b in BASELINES)
            + f" | static pool within {BOUND_FACTOR:g}x bound: replicas: att. / overflow | ours with priority "
            f"{other_priority(base)}: att. / overflow / tokens / hours | targets |"
            + (" ours by class: attainment (lost) |" if base.classes else "") + "\n"
            + "|---" * (14 + len(BASELINES) + bool(base.classes)) + "|")
