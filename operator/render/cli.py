"""`floodway render -f service.yaml`: print the objects the operator would apply for each InferenceService in
the file (the same render()), as a dry run to read, diff or lint. Nothing is sent to a cluster."""

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def render(
        filename: Path = typer.Option(..., "--filename", "-f", help="YAML with one or more InferenceServices."),
        replicas: int = typer.Option(None, help="Engine replicas as if the autoscaler wanted them (default: "
                                     "replicas.min, or replicas.count with autoscaling.mode external)."),
        uid: str = typer.Option(None, help="InferenceService uid for the owner references (default: none)."),
        operator_namespace: str = typer.Option(None, help="The operator's namespace, admitted by the engines' "
                                               "NetworkPolicy (default: any namespace)."),
    ) -> None:
        """Print the Kubernetes objects the operator would apply for an InferenceService file (a dry run)."""
        import yaml
        from floodway.operator.planner.fit import spec_fit
        from floodway.operator.render import Images, Owner
        from floodway.operator.render import render as render_objects
        from floodway.operator.spec import SpecError, parse

        try:
            docs = [d for d in yaml.safe_load_all(filename.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            typer.echo(f"cannot read {filename}: {e}", err=True)
            raise typer.Exit(2) from None
        out = []
        for doc in docs:
            try:
                obj = parse(doc)
                owner = Owner(obj.metadata.name, obj.metadata.namespace, uid)
                out += render_objects(obj.spec, owner, Images.from_env(), replicas, operator_namespace)
            except SpecError as e:
                typer.echo(f"{filename}: {e}", err=True)
                raise typer.Exit(1) from None
            level, message = spec_fit(obj.spec)  # what the FitsGPU condition would say
            typer.echo(f"# {obj.metadata.name}: FitsGPU {level}: {message}", err=True)
        typer.echo(yaml.safe_dump_all(out, sort_keys=False), nl=False)
