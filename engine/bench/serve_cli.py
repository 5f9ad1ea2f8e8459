"""`floodway bench serve`: a short guidellm sweep (with goodput against an SLO) against an engine."""

import tempfile
from pathlib import Path

import typer

LOCAL_MODEL = "floodway/tiny-llama"


def served_model(listing: dict) -> str:
    """The one model an OpenAI-compatible server lists at /v1/models; ValueError when it lists none or several."""
    names = [m.get("id") for m in listing.get("data") or [] if isinstance(m, dict) and m.get("id")]
    if len(names) != 1:
        raise ValueError(f"the target lists {len(names)} models ({', '.join(names) or 'none'}) at /v1/models: "
                         "pass --model")
    return names[0]


def target_model(target: str) -> str:
    """The model name requests to `target` must carry, read from its /v1/models."""
    import httpx

    try:
        r = httpx.get(target.rstrip("/") + "/v1/models", timeout=10)
        r.raise_for_status()
        return served_model(r.json())
    except (httpx.HTTPError, ValueError) as e:
        raise ValueError(f"cannot read the served model from {target}/v1/models ({e}): pass --model") from None


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("serve")
    def serve(
        target: str = typer.Option(None, help="Server base URL; default: start a local `floodway engine`."),
        model: str = typer.Option(None, help="Model name sent (and its tokenizer for guidellm); default: the one "
                                             f"the target lists at /v1/models, or {LOCAL_MODEL} served locally."),
        endpoint: str = typer.Option("/v1/completions", help="/v1/completions or /v1/chat/completions."),
        prompt_tokens: int = typer.Option(32, help="Synthetic prompt length."),
        output_tokens: int = typer.Option(16, help="Synthetic output length."),
        sweep_size: int = typer.Option(3, help="Benchmarks in the sweep: synchronous, throughput, then rates."),
        seconds: float = typer.Option(15.0, help="Duration of each benchmark."),
        max_concurrency: int = typer.Option(16, help="Most requests in flight at once."),
        slo_ttft_ms: float = typer.Option(1000.0, help="SLO: time to first token (ms)."),
        slo_tpot_ms: float = typer.Option(200.0, help="SLO: time per output token after the first (ms)."),
        json_out: Path = typer.Option(None, help="Also write guidellm's full JSON report here."),
        venv: Path = typer.Option(None, help="guidellm's own venv (created on first use)."),
        engine_arg: list[str] = typer.Option([], help="Extra flag for the local engine (repeatable)."),
    ) -> None:
        """Benchmark an OpenAI-compatible server with guidellm (installed into its own venv on first use)."""
        import dataclasses
        import subprocess

        from floodway.engine.bench.guidellm import (
            DEFAULT_VENV,
            SweepSpec,
            ensure_guidellm,
            guidellm_argv,
            guidellm_env,
        )
        from floodway.engine.models.builtin import BUILTIN_MODELS, resolve_model
        from floodway.operator.procs import FLOODWAY_ARGV, free_port, start

        if model is None:
            try:
                model = target_model(target) if target else LOCAL_MODEL
            except ValueError as e:
                raise typer.BadParameter(str(e)) from e
        spec = SweepSpec(target=target or "", model=model, tokenizer=model, endpoint=endpoint,
                         prompt_tokens=prompt_tokens, output_tokens=output_tokens, sweep_size=sweep_size,
                         seconds=seconds, max_concurrency=max_concurrency, slo_ttft_ms=slo_ttft_ms,
                         slo_tpot_ms=slo_tpot_ms, json_path=str(json_out.resolve()) if json_out else None)
        try:
            spec.validate()
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
        if model in BUILTIN_MODELS:  # guidellm counts tokens with the model's own tokenizer, from its folder
            spec = dataclasses.replace(spec, tokenizer=resolve_model(model))
        exe = ensure_guidellm(venv or DEFAULT_VENV, log=typer.echo)
        proc = None
        with tempfile.TemporaryDirectory(prefix="floodway-bench-") as tmp:
            if not target:
                port = free_port()
                argv = [*FLOODWAY_ARGV, "engine", "--model", model, "--host", "127.0.0.1", "--port", str(port),
                        *engine_arg]
                typer.echo(f"starting {' '.join(argv[3:])}")
                proc = start(argv, port, "/ready", timeout_s=600, log_path=str(Path(tmp, "engine.log")))
                spec = dataclasses.replace(spec, target=proc.url)
            try:
                typer.echo(" ".join(guidellm_argv("guidellm", spec)))
                rc = subprocess.run(guidellm_argv(exe, spec), env=guidellm_env(), cwd=tmp).returncode
            finally:
                if proc is not None:
                    proc.stop()
        raise typer.Exit(rc)
