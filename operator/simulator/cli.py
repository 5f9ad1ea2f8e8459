"""`floodway simulate`: replay a trace against autoscaling policies side by side."""

import typer
from floodway.operator.simulator.population import ABUSE, TENANT_HEADROOM

DEFAULT_POLICIES = ["floodway+overflow", "floodway", "static-peak", "static-mean", "hpa", "keda", "keda+overflow",
                    "kpa", "kpa+overflow"]


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        trace: str = typer.Option(None, help="azure-conv, mooncake, a .csv/.jsonl file, or a generator such as "
                                             "'idle-burst:burst_rate=30', 'steps:rates=2/10/4', 'on-off'."),
        scenario: str = typer.Option(None, help="A named scenario from the README (sets trace, SLO, engine)."),
        policy: list[str] = typer.Option(None, help="Policies to compare (repeat): floodway, "
                                                    "floodway-reactive (ours without the history's forecast), "
                                                    "static-peak, static-mean, hpa, keda, kpa; suffix +overflow to "
                                                    "enable it."),
        overflow: bool = typer.Option(False, "--overflow", help="Run every listed policy with overflow."),
        png: str = typer.Option(None, help="Write a plot of arrivals, replicas, queue and overflow here."),
        compress: float = typer.Option(None, help="Replay the trace this many times faster."),
        profile: str = typer.Option(None, help="Replica profile JSON from `floodway bench engine --profile-out`."),
        max_num_seqs: int = typer.Option(None, help="Override the profile's max_num_seqs (batch cap)."),
        cold_start: float = typer.Option(120.0, help="Seconds from a replica's start to ready."),
        ttft_slo: float = typer.Option(None, help="TTFT SLO in seconds."),
        tpot_slo: float = typer.Option(None, help="TPOT SLO in seconds."),
        attainment: float = typer.Option(0.99, help="SLO attainment target."),
        target_concurrency: float = typer.Option(None, help="Our policy's (and KPA's) in-flight target per replica "
                                                 "(default: the spec's, 5/8 of the batch)."),
        overflow_max_waiting: float = typer.Option(None, help="Gateway overflows at this many waiting per replica "
                                                              "(default: the spec's overflow.maxWaitingPerReplica)."),
        overflow_ttft_factor: float = typer.Option(None, help="Gateway overflows when the predicted TTFT exceeds this "
                                                              "share of the TTFT SLO (default: the gateway's "
                                                              "predicted_ttft_factor)."),
        overflow_rpm: float = typer.Option(None, help="Overflow budget in requests per minute (default unlimited)."),
        waiting_includes_prefill: bool = typer.Option(False, "--waiting-includes-prefill",
                                                      help="The gateway counts requests still in prefill as "
                                                           "waiting (for its overflow rule)."),
        prefill_backlog_ttft: bool = typer.Option(True, "--prefill-backlog-ttft/--no-prefill-backlog-ttft",
                                                  help="The gateway predicts TTFT from the prefill tokens ahead "
                                                       "of the request (the gateway's rule); --no-: from waiting "
                                                       "counts and mean latency (the former rule)."),
        learned_prefill_rate: bool = typer.Option(False, "--learned-prefill-rate",
                                                  help="The backlog prediction divides by the prefill rate "
                                                       "earlier answers showed up to their first token, as the "
                                                       "gateway does for runtimes that export none (vLLM); "
                                                       "default: the rate each replica exports, as ours do."),
        prefill_budget: bool = typer.Option(True, "--prefill-budget/--no-prefill-budget",
                                            help="Replicas budget each step's prefill to keep the TPOT SLO "
                                                 "(the engine's --tpot-slo-ms, set by the operator)."),
        prefix_cache: str = typer.Option(None, help="Model the replicas' prefix caches (traces with block ids: "
                                                    "mooncake) with the gateway routing on 'load' only or "
                                                    "'prefix'-aware; prints each replica's hit rate."),
        overflow_share: float = typer.Option(None, help="Share of requests and of tokens our policy may leave to the "
                                                        "overflow API when it runs with overflow (0: pay all back; "
                                                        "default: the spec's autoscaling.overflowShare)."),
        priority: str = typer.Option(None, help="What wins where the overflow budget and the SLO cannot both hold: "
                                                "slo or budget (the gateway caps overflow at the share; default: the "
                                                "spec's autoscaling.priority)."),
        adapters: str = typer.Option(None, help="LoRA adapters' shares of the requests, e.g. "
                                                "'support=0.3,legal=0.1' (the rest name the base model)."),
        overflow_models: str = typer.Option(None, help="The gateway's overflow.models for adapters, e.g. "
                                                       "'support=api-model': a request for an adapter without an "
                                                       "entry never overflows."),
        max_loras: int = typer.Option(None, min=1, help="Adapters each replica holds resident at once (the "
                                                        "engines' --max-loras; default 1)."),
        classes: str = typer.Option(None, help="SLO classes' shares of the requests, of the built-in interactive, "
                                               "standard and batch, e.g. 'interactive=0.3,standard=0.5,batch=0.2' "
                                               "(prints attainment per class)."),
        batch_max_replicas: int = typer.Option(None, min=0, help="The batch class's maxReplicas: its demand alone "
                                                                 "scales the service only this far (default: no "
                                                                 "cap)."),
        tenants: int = typer.Option(None, min=1, help="Tenants t1..tN sending the trace evenly, each held to its "
                                                      "limits; the last sends --abuse times its share."),
        abuse: float = typer.Option(None, min=1.0, help="The last tenant's traffic in multiples of its share "
                                                        f"(default {ABUSE:g}; 1: no abusive tenant)."),
        tenant_rpm: int = typer.Option(None, min=1, help="Each tenant's maxRequestsPerMinute (default: "
                                                         f"{TENANT_HEADROOM:g}x a fair tenant's share of the trace's "
                                                         "busiest minute)."),
        scale_to_zero: float = typer.Option(None, help="Let our policy scale to zero after this many idle seconds."),
        static_peak: int = typer.Option(None, help="Static peak pool size (default: found by simulation)."),
        traces_dir: str = typer.Option(None, help="Folder of the real traces (default: the vendored data/traces)."),
        seed: int = typer.Option(0, help="Seed of synthetic traces."),
        gpu_price_per_hour: float = typer.Option(None, help="Price of one GPU per hour in dollars (default: the "
                                                 "planner table's for the profile's GPU, where it has one)."),
        api_price_in: float = typer.Option(None, help="Overflow API price per million prompt tokens, in dollars."),
        api_price_out: float = typer.Option(None, help="Overflow API price per million output tokens, in dollars."),
        sweep: bool = typer.Option(False, "--sweep", help="Our policy vs the bound (bound.py), HPA, KEDA and KPA "
                                                          "over the trace family and seeds 0..4, one table and "
                                                          "a tally of the targets met."),
        scenarios: str = typer.Option(None, help="With --sweep: a comma list of the family's scenarios only."),
        seeds: int = typer.Option(5, help="With --sweep: seeds 0..N-1 of the seeded scenarios."),
        jobs: int = typer.Option(1, help="With --sweep: rows run at once in worker processes (one per core)."),
    ) -> None:
        """Simulate policies on a trace: SLO attainment, goodput, TTFT, replica-hours, overflow, scale events."""
        from floodway.operator.simulator.run import Options, run_cli

        try:
            opts = Options(
                trace=trace, scenario=scenario, policies=list(policy or []) or list(DEFAULT_POLICIES),
                overflow=overflow, png=png, compress=compress, profile=profile, max_num_seqs=max_num_seqs,
                cold_start_s=cold_start, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo, attainment=attainment,
                target_concurrency=target_concurrency, overflow_max_waiting=overflow_max_waiting,
                overflow_ttft_factor=overflow_ttft_factor, overflow_rpm=overflow_rpm,
                waiting_includes_prefill=waiting_includes_prefill, scale_to_zero_s=scale_to_zero,
                ttft_from_prefill_backlog=prefill_backlog_ttft, learned_prefill_rate=learned_prefill_rate,
                prefill_budget=prefill_budget,
                overflow_share=overflow_share, priority=priority, prefix=prefix_cache,
                adapters=adapters, overflow_models=overflow_models, max_loras=max_loras, classes=classes,
                batch_max_replicas=batch_max_replicas, tenants=tenants, abuse=abuse, tenant_rpm=tenant_rpm,
                static_peak=static_peak, traces_dir=traces_dir, seed=seed, gpu_price_per_hour=gpu_price_per_hour,
                api_price_in=api_price_in, api_price_out=api_price_out)
            if sweep:
                from floodway.operator.simulator import sweep as sw

                family = tuple(scenarios.split(",")) if scenarios else sw.FAMILY
                unknown = set(family) - set(sw.FAMILY)
                if unknown:
                    raise ValueError(f"not in the family: {sorted(unknown)}; choose from {', '.join(sw.FAMILY)}")
                typer.echo(sw.header(opts))
                done = []
                for row in sw.rows(opts, range(seeds), family, jobs):
                    typer.echo(sw.render(row))  # row by row: a sweep takes minutes
                    done.append(row)
                typer.echo("\n" + sw.tally(done))
                return
            out = run_cli(opts)
        except (ValueError, FileNotFoundError) as e:
            raise typer.BadParameter(str(e)) from None
        typer.echo(out)
