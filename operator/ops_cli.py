"""Commands of the operator area: `floodway crd`, `floodway operator`, `floodway up`, `floodway render`."""

import importlib

import typer

_MODULES = ("floodway.operator.crdgen.cli", "floodway.operator.controller.cli", "floodway.operator.local.cli",
            "floodway.operator.render.cli")


def register(app: typer.Typer) -> None:
    for name in _MODULES:
        importlib.import_module(name).register(app)
