"""`floodway bench`: the sub-app the top-level CLI attaches, with the engine's benches (engine/bench/cli.py) and the
control plane's (`gateway`, `prediction`, `routing`). Heavy imports stay inside the commands."""

import typer
from floodway.engine.bench import cli as engine_bench
from floodway.operator.gateway.cli import exit_2_on_value_error

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks that print ratios against baselines run side by side.")
engine_bench.register(bench_app)


@bench_app.command("gateway")
def bench_gateway(
    rate: list[float] = typer.Option([10.0, 200.0], help="Requests per second (fixed rate, open loop); "
                                     "repeat for several rates."),
    duration: float = typer.Option(3.0, help="Seconds per phase (direct, then through the gateway)."),
    model: str = typer.Option("floodway/tiny-llama", help="Model the engine serves."),
    max_tokens: int = typer.Option(1, help="Tokens per request; 1 isolates the request path."),
) -> None:
    """Added latency (p50/p99) and throughput through the gateway against direct access, same run."""
    from floodway.operator.bench.gateway import run_bench

    with exit_2_on_value_error():
        typer.echo(run_bench(rate, duration, model, max_tokens))


@bench_app.command("prediction")
def bench_prediction(
    engines: int = typer.Option(1, help="Engine processes behind the gateway."),
    requests: int = typer.Option(400, help="Distinct streamed prompts of 40-400 tokens, sent once each."),
    rate: float = typer.Option(14.0, help="Requests per second (fixed rate, open loop): with the other "
                               "defaults, queues near the SLO without growing for good."),
    ttft_slo_ms: float = typer.Option(500.0, help="The gateway's TTFT SLO: answers predicted at least half its "
                                      "overflow threshold are measured (no overflow API: all stay local)."),
    step_delay_ms: int = typer.Option(20, help="Each engine step takes at least this much more."),
    max_num_batched_tokens: int = typer.Option(128, help="Token budget of one engine step: prefill in chunks."),
    max_num_seqs: int = typer.Option(64, help="Sequences per engine batch."),
    max_tokens: int = typer.Option(8, help="Tokens generated per request."),
    model: str = typer.Option("floodway/tiny-llama", help="Model the engines serve."),
    seed: int = typer.Option(0, help="Draws the prompts' lengths and the gateway's routing."),
) -> None:
    """Actual over predicted TTFT on real engines: the error the gateway's predicted_ttft_factor must cover."""
    from floodway.operator.bench.prediction import run_bench as run_prediction

    with exit_2_on_value_error():
        typer.echo(run_prediction(engines, requests, rate, ttft_slo_ms, step_delay_ms, max_num_batched_tokens,
                                  max_num_seqs, max_tokens, model, seed))


@bench_app.command("routing")
def bench_routing(
    engines: int = typer.Option(4, help="Engine processes behind the gateways."),
    conversations: int = typer.Option(40, help="Mooncake conversations replayed (every turn of each)."),
    rate: float = typer.Option(0.5, help="Requests per second (fixed rate, open loop)."),
    kv_blocks: int = typer.Option(256, help="KV blocks per engine (16 tokens each): scarce by configuration."),
    max_tokens: int = typer.Option(4, help="Tokens generated per request."),
    step_delay_ms: int = typer.Option(50, help="Each engine step takes at least this much more."),
    max_num_batched_tokens: int = typer.Option(64, help="Token budget of one engine step."),
    max_num_seqs: int = typer.Option(4, help="Sequences per engine batch."),
    max_blocks: int = typer.Option(32, help="Longest prompt, in trace blocks (16 tokens each)."),
    model: str = typer.Option("floodway/tiny-llama", help="Model the engines serve (a built-in one)."),
    replay_step_s: list[float] = typer.Option([], help="Replay the Mooncake-shaped workload offline instead, "
                                              "no processes: the engines' scheduler and KV cache at this many "
                                              "simulated seconds per step; repeat for several."),
    seeds: int = typer.Option(None, help="Draws of the power-of-two choices: the replay averages this many "
                              "runs (default 5); the live bench runs this many rounds, each with fresh prompt "
                              "texts and gateways seeded 0, 1, ..., and pools them (default 1)."),
) -> None:
    """Prefix-aware against load-only routing, same engines and schedule: prefix-cache hit rate against the
    single-engine bound, TTFT p50/p99 and per-engine spread, on Mooncake-shaped and unshared traffic."""
    from floodway.operator.bench.routing import run_bench as run_routing

    with exit_2_on_value_error():
        if replay_step_s:
            from floodway.operator.bench.prefix_replay import EngineShape, report

            typer.echo(report(engines, conversations, rate, EngineShape(kv_blocks, max_num_seqs,
                                                                        max_num_batched_tokens, max_tokens),
                              max_blocks, replay_step_s, seeds or 5))
            return
        typer.echo(run_routing(engines, conversations, rate, kv_blocks, max_tokens, step_delay_ms,
                               max_num_batched_tokens, max_num_seqs, max_blocks, model, seeds=seeds or 1))


@bench_app.command("fair-share")
def bench_fair_share(
    capacity: int = typer.Option(1000, help="Tokens' worth of requests the pool takes from the queue per tick."),
    ticks: int = typer.Option(600, help="Ticks simulated (deterministic: no clock, no randomness)."),
) -> None:
    """Share of tokens each tenant gets from the gateway's hold queue under overload, VTC against FIFO."""
    from floodway.operator.bench.fair_share import run_bench as run_fair_share

    typer.echo(run_fair_share(capacity, ticks))


@bench_app.command("classes")
def bench_classes(
    scenarios: str = typer.Option(None, help="Comma list of the simulator's scenarios (default: the family of "
                                             "`floodway simulate --sweep`)."),
    seeds: str = typer.Option("0", help="Comma list of seeds, each run on every scenario."),
    jobs: int = typer.Option(1, min=1, help="Simulations run at once in worker processes (one per core)."),
) -> None:
    """Issue 40's targets for tenants and SLO classes, one row per scenario and seed: floodway+overflow with
    classes interactive=0.3,standard=0.5,batch=0.2 and five tenants, t5 sending 10x its share, against the same
    without t5's abuse. Rows also go to stderr as they finish."""
    from floodway.operator.bench.class_targets import table, tally
    from floodway.operator.bench.classes import run_bench as run_classes
    from floodway.operator.simulator.scenarios import FAMILY, SCENARIOS

    with exit_2_on_value_error():
        names = [s for s in scenarios.split(",") if s] if scenarios else list(FAMILY)
        unknown = sorted(set(names) - set(SCENARIOS))
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
        verdicts = run_classes(names, [int(s) for s in seeds.split(",") if s], jobs)
        typer.echo(table(verdicts) + "\n\n" + tally(verdicts))
