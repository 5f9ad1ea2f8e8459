"""What `floodway simulate` does, as a function of its options (the CLI is a thin shell around it)."""

from dataclasses import dataclass, replace

from floodway.operator.autoscaler.policy import AutoscalerPolicy
from floodway.operator.gateway.overflow import BudgetLimits, OverflowPolicy
from floodway.operator.simulator import compare
from floodway.operator.simulator.des import SimConfig
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.report import plot, summarize, table
from floodway.operator.simulator.scenarios import SCENARIOS, Scenario
from floodway.operator.simulator.traces import compress as compress_trace
from floodway.operator.simulator.traces import rate_stats, spread_ticks, trace_from_spec

# The gateway's predicted_ttft_factor by how it predicts TTFT, chosen from the scenario runs in the README:
# the latency-average prediction misses bursts of long prompts, so it needs the wider margin.
TTFT_FACTOR = {False: 0.5, True: 0.6}  # keyed by ttft_from_prefill_backlog


@dataclass(frozen=True)
class Options:
    trace: str | None = None
    scenario: str | None = None
    policies: tuple[str, ...] | list[str] = ("floodway+overflow", "static-peak", "keda")
    overflow: bool = False
    png: str | None = None
    compress: float | None = None
    profile: str | None = None
    max_num_seqs: int | None = None
    cold_start_s: float = 120.0
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    attainment: float = 0.99
    target_concurrency: float | None = None
    overflow_max_waiting: float = 2.0
    overflow_ttft_factor: float | None = None  # None: TTFT_FACTOR of the gateway's prediction
    overflow_rpm: float | None = None
    waiting_includes_prefill: bool = False
    ttft_from_prefill_backlog: bool = True
    prefill_budget: bool = True
    scale_to_zero_s: float | None = None
    overflow_share: float = 0.0
    prefix: str | None = None  # SimConfig.prefix
    static_peak: int | None = None
    traces_dir: str | None = None
    seed: int = 0


def _scenario(opts: Options) -> Scenario:
    if opts.scenario is None:
        if opts.trace is None:
            raise ValueError("give --trace or --scenario (one of: " + ", ".join(SCENARIOS) + ")")
        return Scenario(opts.trace, opts.trace)
    if opts.scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {opts.scenario!r}; choose from {', '.join(SCENARIOS)}")
    sc = SCENARIOS[opts.scenario]
    return replace(sc, trace=opts.trace) if opts.trace else sc


def _pick(value, default):
    return default if value is None else value


def prepare(opts: Options):
    """(trace, SimConfig, our policy, policy specs, title) from the options and the scenario's defaults."""
    sc = _scenario(opts)
    trace = trace_from_spec(sc.trace, opts.traces_dir, opts.seed)
    if sc.spread_tick_s:
        trace = spread_ticks(trace, sc.spread_tick_s, opts.seed)
    trace = compress_trace(trace, _pick(opts.compress, sc.compress))
    profile = ReplicaProfile.from_json(opts.profile) if opts.profile else ReplicaProfile()
    profile = replace(profile, max_num_seqs=_pick(opts.max_num_seqs, sc.max_num_seqs))
    ttft, tpot = _pick(opts.ttft_slo_s, sc.ttft_slo_s), _pick(opts.tpot_slo_s, sc.tpot_slo_s)
    if opts.cold_start_s < 0:
        raise ValueError("cold start must be >= 0 seconds")
    budget = BudgetLimits(requests_per_minute=opts.overflow_rpm)
    cfg = SimConfig(profile=profile, cold_start_s=opts.cold_start_s, ttft_slo_s=ttft, tpot_slo_s=tpot,
                    waiting_includes_prefill=opts.waiting_includes_prefill,
                    ttft_from_prefill_backlog=opts.ttft_from_prefill_backlog, prefill_budget=opts.prefill_budget,
                    prefix=opts.prefix,
                    overflow=OverflowPolicy(max_waiting_per_replica=opts.overflow_max_waiting, ttft_slo_s=ttft,
                                            predicted_ttft_factor=_pick(opts.overflow_ttft_factor,
                                                                        TTFT_FACTOR[opts.ttft_from_prefill_backlog]),
                                            budget=budget))
    ours = AutoscalerPolicy(target_concurrency=_pick(opts.target_concurrency, sc.target_concurrency),
                            slo_attainment=opts.attainment, min_replicas=0 if opts.scale_to_zero_s is not None else 1,
                            scale_to_zero_after_s=opts.scale_to_zero_s, overflow_share=opts.overflow_share,
                            prefill_tokens_per_s=profile.prefill_tokens_per_s)
    specs = [p if not opts.overflow or p.endswith(compare.OVERFLOW_SUFFIX) else p + compare.OVERFLOW_SUFFIX
             for p in opts.policies]
    for p in specs:
        compare.parse_policy(p)
    return trace, cfg, ours, list(dict.fromkeys(specs)), sc.description


def run_cli(opts: Options) -> str:
    trace, cfg, ours, specs, title = prepare(opts)
    sizing = compare.size(trace, cfg, ours.slo_attainment, opts.static_peak)
    sizing, results = compare.run(trace, specs, cfg, ours, sizing)
    peak_hours = None
    if "static-peak" not in specs:
        peak_res = compare.run(trace, ["static-peak"], cfg, ours, sizing)[1][0]
        peak_hours = peak_res.replica_hours
    summaries = [summarize(r) for r in results]
    for s in summaries:
        if s.name == "static-peak":
            peak_hours = s.replica_hours
    mean, peak = rate_stats(trace)
    lines = [f"{title}: {len(trace)} requests over {trace[-1].arrival_s / 60:.1f} min, mean {mean:.2f} req/s, "
             f"peak 60 s {peak:.2f} req/s; SLO TTFT {cfg.ttft_slo_s:g} s, TPOT {cfg.tpot_slo_s:g} s; cold start "
             f"{cfg.cold_start_s:g} s; static peak {sizing.static_peak} replicas, static mean {sizing.static_mean}",
             "", table(summaries, peak_hours)]
    if cfg.prefix is not None:
        lines.append(f"\nprefix-cache hit rate ({cfg.prefix} routing), per replica that ran:")
        lines += [f"{r.name}: " + " ".join(f"{h / q:.0%}" if q else "-" for h, q in r.prefix) for r in results]
    if opts.png:
        plot(results, opts.png, title)
        lines.append(f"\nplot: {opts.png}")
    return "\n".join(lines)
