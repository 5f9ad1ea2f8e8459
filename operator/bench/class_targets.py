"""Issue 40's targets for tenants and SLO classes (item 5), judged from the simulator's summaries per class and tenant
(report.population) of one (scenario, seed) run twice: with the abusive tenant (the last one sending --abuse 10 times
its share) and without it (--abuse 1, the same requests tagged the same).

- interactive >= 99.5% and standard >= 99% attainment, of their admitted requests in the abusive run;
- batch: none lost, no batch request rejected nor overflowed in the abusive run;
- the abusive tenant held to its limit: its busiest admitted minute at most twice maxRequestsPerMinute (what a token
  bucket allows: a minute's worth held, a minute's worth refilled) while the fair tenants are never refused;
- the fair tenants' attainment moved by at most 0.5 points: each one's in the abusive run minus in the fair run.
"""

from dataclasses import dataclass

from floodway.operator.simulator.report import GroupSummary, markdown

INTERACTIVE = 0.995
STANDARD = 0.99
BUCKET = 2  # a tenant's busiest admitted minute may reach this many times its maxRequestsPerMinute
MAX_DROP = 0.5  # points of attainment a fair tenant may lose to the abusive one
HEADER = ("scenario", "tenants' limit (req/min)", "interactive >= 99.5%", "standard >= 99%", "batch: none lost",
          "t5 held to its limit", "others within 0.5 points")
TARGETS = HEADER[2:]


@dataclass(frozen=True)
class Verdict:
    label: str
    limit: int
    cells: tuple[str, ...]  # one per target, "yes..." or "no..."

    def misses(self) -> list[str]:
        return [t for t, c in zip(TARGETS, self.cells, strict=True) if c.startswith("no")]


def _yes(ok: bool, text: str) -> str:
    return f"{'yes' if ok else 'no'}{text}"


def _class(groups: dict[str, GroupSummary], name: str, target: float) -> str:
    g = groups.get(f"class {name}")
    return "no: not in the population" if g is None else _yes(g.attainment >= target, f", {g.attainment:.2%}")


def judge(label: str, abusive: list[GroupSummary], fair: list[GroupSummary], limit: int, abuser: str) -> Verdict:
    """The row of targets from the abusive run's and the fair run's summaries, the tenants' maxRequestsPerMinute and
    the abusive tenant's name."""
    a, f = {g.name: g for g in abusive}, {g.name: g for g in fair}
    batch = a.get("class batch")
    lost = "no: not in the population" if batch is None else _yes(
        batch.rejected == 0 and batch.overflowed == 0, f": {batch.rejected} rejected, {batch.overflowed} overflowed")
    bad = a[f"tenant {abuser}"]
    others = [g for g in abusive if g.name.startswith("tenant ") and g is not bad]
    refused = [g for g in others if g.refused]
    names = [g.name.removeprefix("tenant ") for g in others]
    fairly = f"{names[0]}-{names[-1]} never refused" if not refused else \
        ", ".join(f"{g.name.removeprefix('tenant ')} {g.refused} refused" for g in refused)
    held = _yes(bad.busiest_minute <= BUCKET * limit and not refused,
                f": {bad.refused} refused, at most {bad.busiest_minute} a minute (bound {BUCKET * limit}); {fairly}")
    moves = [(100.0 * (g.attainment - f[g.name].attainment), g.name.removeprefix("tenant ")) for g in others]
    worst, who = min(moves)
    within = _yes(worst >= -MAX_DROP, f": {worst:+.2f} at worst" + ("" if worst >= -MAX_DROP else f" ({who})"))
    return Verdict(label, limit, (_class(a, "interactive", INTERACTIVE), _class(a, "standard", STANDARD), lost, held,
                                  within))


def table(verdicts: list[Verdict]) -> str:
    return markdown(HEADER, [(v.label, str(v.limit), *v.cells) for v in verdicts])


def tally(verdicts: list[Verdict]) -> str:
    """How many rows meet every target, how many each one, and the rows that miss with what they miss."""
    every = [v for v in verdicts if not v.misses()]
    each = ", ".join(f"{t} {sum(t not in v.misses() for v in verdicts)}" for t in TARGETS)
    missed = "; ".join(f"{v.label}: {', '.join(v.misses())}" for v in verdicts if v.misses()) or "none"
    return f"every target: {len(every)} of {len(verdicts)} rows ({each}); misses: {missed}"
