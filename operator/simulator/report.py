"""Summaries of simulation results: the metrics table and the timeline plot (matplotlib, imported lazily)."""

from dataclasses import dataclass

from floodway.operator.planner.prices import Spend, run_spend
from floodway.operator.simulator.des import SimResult
from floodway.operator.stats import quantile


@dataclass(frozen=True)
class Summary:
    name: str
    requests: int
    attainment: float  # share of all requests meeting TTFT and TPOT SLOs (rejected ones miss)
    goodput: float  # requests/s meeting the SLO
    ttft_p50: float
    ttft_p99: float
    replica_hours: float
    overflow_share: float
    rejected: int
    scale_events: int
    overflow_token_share: float = 0.0  # share of all prompt + output tokens served by the overflow API
    spend: Spend | None = None  # at the config's prices


def summarize(res: SimResult) -> Summary:
    cfg = res.config
    met, ttfts, overflow, rejected = 0, [], 0, 0
    tokens = sum(r.prompt + r.output for r in res.requests)
    over_prompt = over_output = 0
    for r in res.requests:
        if r.finish_s is None or r.where == "rejected":
            rejected += 1
            continue
        if r.where == "overflow":
            overflow += 1
            over_prompt += r.prompt
            over_output += r.output
        ttft = r.first_token_s - r.arrival_s
        ttfts.append(ttft)
        tpot = (r.finish_s - r.first_token_s) / (r.output - 1) if r.output > 1 else 0.0
        met += ttft <= cfg.ttft_slo_s and tpot <= cfg.tpot_slo_s
    n = len(res.requests)
    return Summary(res.name, n, met / n, met / max(res.duration_s, 1e-9), quantile(ttfts, 0.5),
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
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(HEADER), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


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
