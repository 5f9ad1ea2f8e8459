"""Summaries of simulation results: the metrics table, the table per class and tenant, and the timeline plot
(matplotlib, imported lazily)."""

from collections import defaultdict
from dataclasses import dataclass

from floodway.operator.planner.prices import Spend, run_spend
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import SimResult
from floodway.operator.simulator.replica import SimRequest
from floodway.operator.simulator.traces import per_span
from floodway.operator.stats import quantile


@dataclass(frozen=True)
class Summary:
    name: str
    requests: int
    # Share of the requests meeting TTFT and TPOT SLOs (rejected ones miss); of those admitted where tenants' limits
    # refuse some (population's table counts those), as the gateway's attainment counts answers.
    attainment: float
    goodput: float  # requests/s meeting the SLO
    ttft_p50: float
    ttft_p99: float
    replica_hours: float
    overflow_share: float
    rejected: int
    scale_events: int
    overflow_token_share: float = 0.0  # share of all prompt + output tokens served by the overflow API
    spend: Spend | None = None  # at the config's prices


def met(cfg: SimConfig, r: SimRequest) -> bool:
    """Whether a request was answered within its class's TTFT and TPOT SLOs (rejected and refused ones miss)."""
    if r.finish_s is None or r.where in ("rejected", "refused"):
        return False
    return r.ttft_s <= cfg.ttft_slo_of(r.klass) and (r.tpot_s is None or r.tpot_s <= cfg.tpot_slo_of(r.klass))


def summarize(res: SimResult) -> Summary:
    cfg = res.config
    hits, ttfts, overflow, rejected = 0, [], 0, 0
    admitted = [r for r in res.requests if r.where != "refused"]
    tokens = sum(r.prompt + r.output for r in admitted)
    over_prompt = over_output = 0
    for r in admitted:
        if r.finish_s is None or r.where == "rejected":
            rejected += 1
            continue
        if r.where == "overflow":
            overflow += 1
            over_prompt += r.prompt
            over_output += r.output
        ttfts.append(r.ttft_s)
        hits += met(cfg, r)
    n = len(admitted)
    return Summary(res.name, n, hits / n, hits / max(res.duration_s, 1e-9), quantile(ttfts, 0.5),
                   quantile(ttfts, 0.99), res.replica_hours, overflow / n, rejected, res.scale_events,
                   (over_prompt + over_output) / tokens if tokens else 0.0,
                   run_spend(cfg.prices, res.replica_hours, n, over_prompt, over_output))


def money(x: float | None) -> str:
    """Dollars for a table cell ("-": no price given)."""
    return "-" if x is None else f"${x:.3f}" if x < 10 else f"${x:,.2f}"


HEADER = ("policy", "SLO attainment", "goodput req/s", "TTFT p50 s", "TTFT p99 s", "replica-hours",
          "vs static peak", "overflow", "overflow tokens", "$/1k self-hosted", "$/1k overflow", "$/1k total",
          "rejected", "scale events")


def table(summaries: list[Summary], reference_hours: float | None = None) -> str:
    """A Markdown table; `reference_hours` (static peak) adds a replica-hours ratio column."""
    rows = []
    for s in summaries:
        ratio = f"{s.replica_hours / reference_hours:.0%}" if reference_hours else "-"
        dollars = s.spend.per_1k() if s.spend else (None, None, None)
        rows.append((s.name, f"{s.attainment:.2%}", f"{s.goodput:.2f}", f"{s.ttft_p50:.3f}", f"{s.ttft_p99:.3f}",
                     f"{s.replica_hours:.2f}", ratio, f"{s.overflow_share:.2%}", f"{s.overflow_token_share:.2%}",
                     *map(money, dollars), str(s.rejected), str(s.scale_events)))
    return markdown(HEADER, rows)


POPULATION_HEADER = ("class / tenant", "requests", "admitted", "admitted busiest min", "TTFT SLO s", "SLO attainment",
                     "overflowed", "refused (tenant limits)", "rejected (capacity)")


@dataclass(frozen=True)
class GroupSummary:
    """The requests of one class or one tenant. Attainment is over the admitted ones (those its tenant's limits
    refused are counted apart, as the gateway's per-class and per-tenant attainment counts answers); rejected: admitted
    and never answered (no capacity and no overflow, or still held at the end): lost. busiest_minute: the most
    admitted in one minute of the trace (from 0), what a tenant's maxRequestsPerMinute bounds (its bucket holds a
    minute's worth and refills one more: at most twice the limit)."""

    name: str
    requests: int
    admitted: int
    busiest_minute: int
    attainment: float
    overflowed: int
    refused: int
    rejected: int
    ttft_slo_s: float | None = None  # a class's (None for a tenant: its requests' own)


def population(res: SimResult) -> list[GroupSummary]:
    """One summary per class (`class NAME`, `class none` for unclassed requests where classes are given) in order of
    first appearance in the trace, then per tenant (`tenant NAME`) by name; [] without classes and tenants."""
    groups: dict[str, list[SimRequest]] = defaultdict(list)
    cfg = res.config
    for r in res.requests:
        if cfg.classes:
            groups[f"class {r.klass or 'none'}"].append(r)
    for r in sorted((r for r in res.requests if r.tenant is not None), key=lambda r: r.tenant):
        groups[f"tenant {r.tenant}"].append(r)
    out = []
    for name, reqs in groups.items():
        admitted = [r for r in reqs if r.where != "refused"]
        first = reqs[0]
        out.append(GroupSummary(
            name, len(reqs), len(admitted), int(max(per_span(admitted, 60.0))) if admitted else 0,
            sum(met(cfg, r) for r in admitted) / len(admitted) if admitted else 1.0,
            sum(r.where == "overflow" for r in reqs), len(reqs) - len(admitted),
            sum(r.where == "rejected" for r in reqs),
            cfg.ttft_slo_of(first.klass) if name.startswith("class ") else None))
    return out


def population_table(groups: list[GroupSummary]) -> str:
    """A Markdown table of `population`'s summaries."""
    rows = [(g.name, str(g.requests), str(g.admitted), str(g.busiest_minute),
             "-" if g.ttft_slo_s is None else f"{g.ttft_slo_s:g}",
             f"{g.attainment:.2%}", str(g.overflowed), str(g.refused), str(g.rejected)) for g in groups]
    return markdown(POPULATION_HEADER, rows)


def markdown(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table, its columns padded to their widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def plot(results: list[SimResult], path: str, title: str = "") -> None:
    """One column of panels per result: arrivals and overflow, replicas desired/ready, queue."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(results), figsize=(4.2 * len(results), 7.5), sharex=True, squeeze=False)
    for col, res in enumerate(results):
        t = [p["t"] / 60 for p in res.timeline]
        a, b, c = axes[0][col], axes[1][col], axes[2][col]
        a.plot(t, [p["arrival_rate"] for p in res.timeline], label="arrivals/s", lw=1)
        a.plot(t, [p["overflow_rate"] for p in res.timeline], label="overflow/s", lw=1)
        a.set_title(res.name, fontsize=9)
        b.step(t, [p["desired"] for p in res.timeline], where="post", label="desired", lw=1)
        b.step(t, [p["ready"] for p in res.timeline], where="post", label="ready", lw=1)
        c.plot(t, [p["queue"] for p in res.timeline], label="queued", lw=1, color="tab:red")
        c.set_xlabel("minutes")
        if col == 0:
            a.set_ylabel("req/s")
            b.set_ylabel("replicas")
            c.set_ylabel("requests queued")
            for ax in (a, b, c):
                ax.legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
