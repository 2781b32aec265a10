"""``tidings serve``: the HTTP API on uvicorn (see ``infrastructure.http.api``)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import uvicorn

from infrastructure.cli.output import configure_logging, err
from infrastructure.cli.runtime import load_settings, opened_app
from infrastructure.http.api import ApiSettings, create_api

log = logging.getLogger("tidings.serve")


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = 8080,
) -> None:
    """Serve the HTTP API (commands, queries, OpenAPI at /openapi.json) until Ctrl-C."""
    settings = load_settings()
    with opened_app() as app:
        configure_logging(logging.INFO)
        api = create_api(
            app,
            ApiSettings(
                rate_per_second=settings.api_rate_per_second, rate_burst=settings.api_rate_burst
            ),
            ready=lambda: bool(app.projections.status() is not None),
        )
        config = uvicorn.Config(
            api, host=host, port=port, log_level="warning", access_log=False, lifespan="off"
        )
        server = uvicorn.Server(config)
        err().print(f"serving the HTTP API on http://{host}:{port} (Ctrl-C to stop)")
        server.run()
