"""`floodway engine`: the OpenAI-compatible server.

Flags are named as vLLM names them where the meaning is the same. Heavy imports stay inside commands.
"""

import dataclasses
import functools
import inspect
import logging

import typer
from floodway.engine.config import EngineConfig


def _config_options() -> list[inspect.Parameter]:
    """One option per EngineConfig field: the flag is the field's name in kebab case, its default, type and
    help are the field's, so a setting is declared once (engine/config.py)."""
    params = []
    for f in dataclasses.fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if f.type is bool else [flag]
        # A repeatable flag not given reads as the field's default (click would give an empty tuple).
        option = typer.Option(f.default, *decls, help=f.metadata["help"], show_default=f.default is not None,
                              callback=_empty_as_none if "list" in str(f.type) else None)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=f.type))
    return params


def _empty_as_none(value: list[str] | None) -> list[str] | None:
    return value or None


def with_engine_config(command):
    """Gives a typer command the EngineConfig options and calls it with `config` built from them."""
    names = [f.name for f in dataclasses.fields(EngineConfig)]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in inspect.signature(command).parameters.values()
           if p.name != "config"]
    params = _config_options() + own

    @functools.wraps(command)
    def wrapper(**kw):
        return command(config=EngineConfig(**{n: kw.pop(n) for n in names}), **kw)

    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def register(app: typer.Typer) -> None:
    @app.command()
    @with_engine_config
    def engine(
        config: EngineConfig,
        host: str = typer.Option("0.0.0.0", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port to listen on."),
        max_waiting_requests: int = typer.Option(256, help="Admission bound: waiting requests (0: unbounded)."),
        max_waiting_tokens: int = typer.Option(0, help="Admission bound: waiting prompt tokens (0: unbounded)."),
        max_body_bytes: int = typer.Option(4 * 2**20, help="Largest request body accepted (413 beyond)."),
        drain_timeout: float = typer.Option(30.0, help="Seconds in-flight requests get to finish after SIGTERM."),
        log_level: str = typer.Option("info", help="Log level."),
    ) -> None:
        """Serve a model over the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models, /health,
        /ready, /metrics), with admission control (429 + Retry-After) and graceful drain on SIGTERM."""
        from floodway.engine.server.state import ServerOptions

        options = ServerOptions(max_waiting_requests=max_waiting_requests or None,
                                max_waiting_tokens=max_waiting_tokens or None, max_body_bytes=max_body_bytes,
                                drain_timeout_s=drain_timeout)
        try:
            config.validate()
            options.validate()
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
        from floodway.engine.server.app import create_app
        from floodway.engine.server.drain import serve

        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        serve(create_app(config, options), host, port, log_level.lower())
