"""``tidings serve``: the HTTP API on uvicorn (see ``infrastructure.http.api``)."""

from __future__ import annotations

import contextlib
import logging
from typing import Annotated

import typer

from application.api_keys.catalog_fill import fill_catalogs
from infrastructure.bootstrap import event_store
from infrastructure.cli.output import configure_logging, err
from infrastructure.cli.runtime import load_settings, opened_app

log = logging.getLogger("tidings.serve")


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = 8080,
) -> None:
    """Serve the HTTP API (commands, queries, OpenAPI at /openapi.json) until Ctrl-C."""
    # The web stack is imported here, not by the module: every CLI process (the worker's
    # too) imports this one to register the command, and would carry it (~11 MiB) unused.
    import uvicorn  # noqa: PLC0415 - the web stack only where it serves

    from infrastructure.http import server as bounded_server  # noqa: PLC0415 - as above
    from infrastructure.http.api import create_api  # noqa: PLC0415 - as above
    from infrastructure.http.door import ApiSettings  # noqa: PLC0415 - as above
    from infrastructure.redis.rate_limit import RedisRateLimiter  # noqa: PLC0415 - as above
    from infrastructure.redis.registry import RedisWorkers  # noqa: PLC0415 - as above

    settings = load_settings()
    rate, burst = settings.api_rate_per_second, settings.api_rate_burst
    # With Redis, a key's budget holds across every serving process.
    limiter = (
        RedisRateLimiter.from_url(settings.redis_url, rate, burst) if settings.redis_url else None
    )
    # The workers' heartbeats, for the console's fleet page (none without Redis).
    fleet = RedisWorkers.from_url(settings.redis_url) if settings.redis_url else None
    with opened_app() as app, contextlib.ExitStack() as closing:
        if limiter is not None:
            closing.callback(limiter.close)
        if fleet is not None:
            closing.callback(fleet.close)
        configure_logging(logging.INFO)
        # Keys from before the per-tenant catalogs are listed, revocable and counted.
        fill_catalogs(app.ctx.store, event_store(app), app.ctx.clock.now())
        api = create_api(
            app,
            ApiSettings(
                rate_per_second=rate,
                rate_burst=burst,
                address_rate_per_second=settings.api_address_rate_per_second,
                address_rate_burst=settings.api_address_rate_burst,
                global_rate_per_second=settings.api_global_rate_per_second,
                global_rate_burst=settings.api_global_rate_burst,
                body_timeout=settings.api_request_timeout,
                dial_out_threads=settings.api_dial_out_threads,
                dial_out_per_tenant=settings.api_dial_out_per_tenant,
                streams_per_key=settings.api_streams_per_key,
                upload_timeout=settings.api_upload_timeout,
                uploads_per_tenant=settings.api_uploads_per_tenant,
                upload_threads=settings.api_upload_threads,
            ),
            ready=lambda: bool(app.projections.status() is not None),
            limiter=limiter,
            fleet=fleet,
        )
        config = bounded_server.config(
            api,
            host=host,
            port=port,
            max_connections=settings.api_max_connections,
            header_timeout=settings.api_request_timeout,
        )
        server = uvicorn.Server(config)
        err().print(f"serving the HTTP API on http://{host}:{port} (Ctrl-C to stop)")
        server.run()
