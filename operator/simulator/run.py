"""What `floodway simulate` does, as a function of its options (the CLI is a thin shell around it)."""

from dataclasses import dataclass, replace

from floodway.operator.planner.prices import spec_prices
from floodway.operator.simulator import compare
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.population import ABUSE, class_shares, class_specs, fair_tenant_rpm, tag_population
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.report import plot, population, population_table, summarize, table
from floodway.operator.simulator.scenarios import SCENARIOS, Scenario
from floodway.operator.simulator.service import capacity_fields, gateway_settings, policies, simulated_spec
from floodway.operator.simulator.traces import (
    adapter_shares,
    parse_pairs,
    rate_stats,
    spread_ticks,
    tag_adapters,
    trace_from_spec,
)
from floodway.operator.simulator.traces import compress as compress_trace


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
    overflow_max_waiting: float | None = None  # None: the spec's default, as the gateway gets it
    overflow_ttft_factor: float | None = None  # None: the gateway's default
    overflow_rpm: float | None = None
    waiting_includes_prefill: bool = False
    ttft_from_prefill_backlog: bool = True
    learned_prefill_rate: bool = False  # SimConfig.learned_prefill_rate
    prefill_budget: bool = True
    scale_to_zero_s: float | None = None
    overflow_share: float | None = None  # None: the spec's autoscaling.overflowShare
    priority: str | None = None  # None: the spec's autoscaling.priority
    prefix: str | None = None  # SimConfig.prefix
    adapters: str | None = None  # Scenario.adapters (None: the scenario's)
    overflow_models: str | None = None  # the gateway's overflow.models, 'support=api-model,...' (SimConfig's)
    max_loras: int | None = None  # SimConfig.max_loras (None: its default)
    classes: str | None = None  # the built-in classes' shares, 'interactive=0.3,...' (population.class_shares)
    batch_max_replicas: int | None = None  # the batch class's maxReplicas (None: no cap)
    tenants: int | None = None  # tenants t1..tN sending the trace (population.tag_population; None: none)
    abuse: float | None = None  # the last tenant's traffic in multiples of its share (None: population.ABUSE)
    tenant_rpm: int | None = None  # each tenant's maxRequestsPerMinute (None: population.fair_tenant_rpm)
    static_peak: int | None = None
    traces_dir: str | None = None
    seed: int = 0
    gpu_price_per_hour: float | None = None  # None: the table's price for the profile's GPU
    api_price_in: float | None = None  # the overflow API's $ per million prompt tokens (None: not priced)
    api_price_out: float | None = None


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
    adapters = _pick(opts.adapters, sc.adapters)
    if adapters:
        trace = tag_adapters(trace, adapter_shares(adapters), opts.seed)
    mix = class_shares(opts.classes) if opts.classes else {}
    rpm = None
    if opts.tenants is None and (opts.abuse is not None or opts.tenant_rpm is not None):
        raise ValueError("--abuse and --tenant-rpm need --tenants")
    if opts.tenants is not None:
        rpm = _pick(opts.tenant_rpm, fair_tenant_rpm(trace, opts.tenants))
    if mix or opts.tenants:
        trace = tag_population(trace, mix, opts.tenants or 0, _pick(opts.abuse, ABUSE), opts.seed)
    profile = ReplicaProfile.from_json(opts.profile) if opts.profile else ReplicaProfile()
    profile = replace(profile, max_num_seqs=_pick(opts.max_num_seqs, sc.max_num_seqs))
    ttft, tpot = _pick(opts.ttft_slo_s, sc.ttft_slo_s), _pick(opts.tpot_slo_s, sc.tpot_slo_s)
    if opts.cold_start_s < 0:
        raise ValueError("cold start must be >= 0 seconds")
    spec = simulated_spec(profile, ttft, tpot, opts.cold_start_s, opts.attainment, opts.target_concurrency,
                          opts.scale_to_zero_s, opts.overflow_max_waiting, opts.gpu_price_per_hour,
                          opts.api_price_in, opts.api_price_out, opts.overflow_share, opts.priority,
                          class_specs(list(mix), ttft, tpot, opts.batch_max_replicas),
                          {"maxRequestsPerMinute": rpm} if rpm else None)
    ours, overflow = policies(spec)
    ours = replace(ours, day_s=sc.day_s)
    gateway = gateway_settings(spec)
    overflow = replace(overflow, enabled=False,
                       budget=replace(overflow.budget, max_requests_per_minute=opts.overflow_rpm),
                       predicted_ttft_factor=_pick(opts.overflow_ttft_factor, overflow.predicted_ttft_factor))
    cfg = SimConfig(profile=profile, cold_start_s=opts.cold_start_s, ttft_slo_s=ttft, tpot_slo_s=tpot,
                    waiting_includes_prefill=opts.waiting_includes_prefill,
                    ttft_from_prefill_backlog=opts.ttft_from_prefill_backlog,
                    learned_prefill_rate=opts.learned_prefill_rate, prefill_budget=opts.prefill_budget,
                    prefix=opts.prefix, overflow=overflow, prices=spec_prices(spec),
                    overflow_models=parse_pairs(opts.overflow_models or "", "overflow models"),
                    max_loras=_pick(opts.max_loras, SimConfig.max_loras), tenants=gateway.tenants,
                    classes={c.name: c for c in gateway.classes},
                    engine_priority=gateway.engine_scheduling_policy == "priority")
    specs = [p if not opts.overflow or p.endswith(compare.OVERFLOW_SUFFIX) else p + compare.OVERFLOW_SUFFIX
             for p in opts.policies]
    for p in specs:
        compare.parse_policy(p)
    return trace, cfg, ours, list(dict.fromkeys(specs)), sc.description


def _prices_line(cfg: SimConfig) -> str:
    p = cfg.prices
    gpu = "no GPU price (--gpu-price-per-hour)" if p.gpu_per_hour is None else \
        f"GPU ${p.gpu_per_hour:g}/hour ({cfg.profile.gpu or 'the profile'})"
    api = "overflow API not priced (--api-price-in/--api-price-out)" if not p.api_known else \
        f"overflow API ${p.input_per_million or 0:g} / ${p.output_per_million or 0:g} per million prompt / output " \
        "tokens"
    return f"prices: {gpu}; {api}; $/1k columns: dollars per 1,000 requests of the trace"


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
             f"replica profile {cfg.profile.model} at this TPOT SLO, as spec fields: autoscaling: "
             + str(capacity_fields(cfg.profile, cfg.tpot_slo_s)).replace("'", ""),
             _prices_line(cfg), "", table(summaries, peak_hours)]
    if cfg.prefix is not None:
        lines.append(f"\nprefix-cache hit rate ({cfg.prefix} routing), per replica that ran:")
        lines += [f"{r.name}: " + " ".join(f"{h / q:.0%}" if q else "-" for h, q in r.prefix) for r in results]
    if cfg.classes or cfg.tenants.enabled():
        rpm = cfg.tenants.default.max_requests_per_minute
        held = f"; each tenant held to {rpm} requests per minute, t{opts.tenants} sending " \
               f"{_pick(opts.abuse, ABUSE):g}x its share" if rpm else ""
        lines.append("\nper class and tenant (attainment of the admitted requests, each against its class's TTFT and "
                     f"TPOT SLOs{held}):")
        for r in results:
            lines += [f"\n{r.name}:", population_table(population(r))]
    if opts.png:
        plot(results, opts.png, title)
        lines.append(f"\nplot: {opts.png}")
    return "\n".join(lines)
