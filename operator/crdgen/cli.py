"""`floodway crd`: regenerate the CRD files from the spec models, or check them for drift."""

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def crd(
        check: bool = typer.Option(False, "--check", help="Exit 1 if the checked-in CRD differs; write nothing."),
        root: Path = typer.Option(None, help="Repository root holding crds/ and charts/floodway/crds/."),
        stdout: bool = typer.Option(False, "--stdout", help="Print the CRD instead of writing files."),
    ) -> None:
        """Generate the InferenceService CRD (OpenAPI schema, CEL rules, printer columns) from the spec models."""
        from floodway.operator.crdgen import files

        if stdout:
            typer.echo(files.render_yaml(), nl=False)
            return
        base = root or files.REPO_ROOT
        if check:
            stale = files.stale_paths(base)
            for p in stale:
                typer.echo(f"stale: {p}", err=True)
            raise typer.Exit(1 if stale else 0)
        for p in files.write(base):
            typer.echo(f"wrote {p}")
