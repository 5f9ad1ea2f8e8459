"""The `floodway` command line. Each area registers its own subcommands; imports stay lazy so that
`floodway --help` is fast and the control-plane image never imports torch."""

import importlib

import typer

# The one place product code imports bench code (tests/unit/test_bench_boundary.py allows it): `floodway bench`.
from floodway.operator.bench.cli import bench_app

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Floodway: self-hosted LLM inference on Kubernetes that keeps its SLOs through spikes.")
app.add_typer(bench_app, name="bench")


def _print_version(value: bool) -> None:
    if value:
        from floodway.operator.version import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                        help="Print the version (of the package, chart and images) and exit.")):
    pass


# Each module exposes register(app) and adds its commands; keep torch imports inside commands.
COMMAND_MODULES = [
    "floodway.operator.ops_cli",
    "floodway.engine.cli",
    "floodway.engine.server.cli",
    "floodway.operator.planner.cli",
    "floodway.operator.gateway.cli",
    "floodway.operator.simulator.cli",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
