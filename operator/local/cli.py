"""`floodway up [FILE]`: run an InferenceService on this machine."""

import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def up(
        file: Path = typer.Argument(None, help="InferenceService YAML (default: the built-in SmolLM2 model with "
                                    "autoscaling and overflow to a local stand-in engine)."),
        port: int = typer.Option(8000, help="Gateway port: clients send OpenAI requests here."),
        host: str = typer.Option("127.0.0.1", help="Gateway listen address."),
        local_overflow: bool = typer.Option(None, "--local-overflow/--no-local-overflow",
                                            help="Start a second local engine as the overflow API (default: on "
                                            "without FILE, off with FILE)."),
        workdir: Path = typer.Option(None, help="Folder for the gateway config, process logs and the traffic history "
                                               "(kept across runs in the same folder; default: a new temporary one)."),
        status_file: Path = typer.Option(None, help="Write the status as JSON here each tick."),
        ticks: int = typer.Option(0, help="Stop after this many autoscaler ticks (0: run until Ctrl-C)."),
    ) -> None:
        """Run an InferenceService locally: engines, gateway and autoscaler, with the cluster's rules."""
        from floodway.operator import procs
        from floodway.operator.local.cluster_only import local_spec
        from floodway.operator.local.manifest import DEFAULT_MANIFEST, build, overflow_key
        from floodway.operator.local.runner import LocalRunner, status_line
        from floodway.operator.planner.fit import spec_fit
        from floodway.operator.spec import SpecError, load
        from floodway.operator.spec.resource import parse

        use_stand_in = local_overflow if local_overflow is not None else file is None
        try:
            doc = DEFAULT_MANIFEST if file is None else load(file).model_dump(by_alias=True, exclude_none=True)
            parse(doc)  # the file as written must pass before any local override
        except SpecError as e:
            typer.echo(f"invalid InferenceService {file or '(built-in)'}:\n{e}", err=True)
            raise typer.Exit(2) from None

        def prepare(overflow_url: str | None):
            """The manifest as it runs here: cluster-only fields left out (see local/cluster_only.py)."""
            obj = build(doc, overflow_url)
            run = local_spec(obj.spec, os.environ)
            return obj.model_copy(update={"spec": run.spec}), run.warnings

        try:  # every check before anything starts; the stand-in's real URL replaces this one below
            obj, warnings = prepare("http://127.0.0.1:1/v1" if use_stand_in else None)
            key = overflow_key(obj)
        except SpecError as e:
            typer.echo(f"cannot run {file or '(built-in)'} locally:\n{e}", err=True)
            raise typer.Exit(2) from None
        for line in warnings:
            typer.echo(f"warning: {line}", err=True)
        level, message = spec_fit(obj.spec)  # the same check as the operator's FitsGPU condition
        if level == "refuse":
            typer.echo(f"{file or '(built-in)'} cannot fit its GPUs: {message}", err=True)
            raise typer.Exit(2)
        if level == "warning":
            typer.echo(f"warning: {message}", err=True)

        # Only a spec that passed gets a folder: a refused one leaves nothing behind.
        work = str(workdir or tempfile.mkdtemp(prefix="floodway-up-"))
        Path(work).mkdir(parents=True, exist_ok=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stand_in = runner = None
        failed = None
        try:
            if use_stand_in:
                sport = procs.free_port()
                model = doc["spec"]["model"]
                served = (doc["spec"].get("overflow") or {}).get("model") or doc["spec"].get("servedModelName") \
                    or model
                typer.echo(f"starting the local overflow stand-in engine on port {sport}")
                stand_in = procs.start([*procs.FLOODWAY_ARGV, "engine", "--model", model, "--host", "127.0.0.1",
                                        "--port", str(sport), "--served-model-name", served], sport, "/ready", 300.0,
                                       log_path=f"{work}/overflow-engine.log")
                obj, _ = prepare(f"http://127.0.0.1:{stand_in.port}/v1")
            runner = LocalRunner(obj, work, port, key, host, str(status_file) if status_file else None)
            typer.echo(f"starting {obj.spec.replicas.min} of {obj.spec.replicas.max} engine replica(s) of "
                       f"{obj.spec.model} and the gateway (logs in {work})")
            runner.start()
            typer.echo(f"send OpenAI requests to {runner.url}  (model {obj.spec.model_name!r}); Ctrl-C stops")
            n = 0
            live = sys.stdout.isatty()  # a terminal gets one line rewritten in place; a log gets a line a tick
            while not stop.wait(obj.spec.autoscaling.interval_seconds):
                line = status_line(obj.metadata.name, runner.step())
                typer.echo("\r\033[K" + line[: shutil.get_terminal_size().columns - 1] if live else line, nl=not live)
                sys.stdout.flush()
                n += 1
                if ticks and n >= ticks:
                    break
        except RuntimeError as e:  # a process that would not start; its log tail is in the message
            failed = e
        finally:
            typer.echo("\nstopping engines and gateway")
            if runner is not None:
                runner.close()
            if stand_in is not None:
                stand_in.stop()
        if failed is not None:
            typer.echo(f"floodway up: {failed}", err=True)
            raise typer.Exit(1)
