"""`floodway gateway --config FILE`: the OpenAI-compatible gateway."""

from __future__ import annotations

import contextlib

import typer


@contextlib.contextmanager
def exit_2_on_value_error():
    """A bad config or argument: its message on stderr and exit status 2, no traceback."""
    try:
        yield
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    @app.command()
    def gateway(
        config: str = typer.Option(..., "--config", help="Gateway YAML file (the shape the operator renders)."),
        host: str = typer.Option(None, help="Listen address (default: the config's host)."),
        port: int = typer.Option(None, help="Listen port (default: the config's port)."),
        log_level: str = typer.Option("info", help="uvicorn log level."),
    ) -> None:
        """Run the OpenAI-compatible gateway: load-aware routing and overflow to an external API."""
        import logging

        import uvicorn
        from floodway.engine.server.client_limits import ClientLimits
        from floodway.operator.gateway.app import create_app
        from floodway.operator.gateway.config import load_config

        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        with exit_2_on_value_error():
            cfg = load_config(config)
            application = create_app(cfg)
        uvicorn.run(application, host=host or cfg.host, port=cfg.port if port is None else port,
                    log_level=log_level, access_log=False, timeout_graceful_shutdown=15,
                    loop="uvloop", http=ClientLimits, proxy_headers=False)  # httptools, uvloop: the fastest pair
