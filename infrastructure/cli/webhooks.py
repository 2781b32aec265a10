"""``tidings webhooks run``: the webhook delivery loop as a process of its own.

``tidings worker`` runs the same loop beside the supervisor (``--no-webhooks`` turns it
off); any number of these processes may run at once: each delivery is leased to one
of them at a time. On SQLite (embedded) the process also keeps the read models — the
feed among them — current, unless ``--no-projections``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from types import FrameType

import typer

from application.app import App
from infrastructure.bootstrap_workers import build_webhook_dispatcher
from infrastructure.cli.output import (
    MetricsPortOption,
    ProjectionsOption,
    WorkerIdOption,
    configure_logging,
    err,
)
from infrastructure.cli.runtime import is_embedded, load_settings, opened_app
from infrastructure.runtime.metrics_http import serve_metrics

log = logging.getLogger("tidings.webhooks")

app = typer.Typer(name="webhooks", help="Webhook delivery.", no_args_is_help=True)


def follow_projections(tidings: App, stop: threading.Event, interval: float = 0.2) -> None:
    """Keep the read models (the feed among them) current until ``stop``."""
    while not stop.is_set():
        try:
            tidings.projections.catch_up()
        except Exception as error:  # a database hiccup: log, wait, go on
            log.warning("projections.failed error=%s", type(error).__name__)
            stop.wait(1.0)
        stop.wait(interval)


@app.command("run")
def run(
    worker_id: WorkerIdOption = None,
    metrics_port: MetricsPortOption = None,
    projections: ProjectionsOption = None,
) -> None:
    """Deliver webhooks until SIGTERM / SIGINT (attempts in flight finish first)."""
    settings = load_settings()
    with opened_app() as tidings:
        name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        configure_logging(logging.INFO)
        stop = threading.Event()
        dispatcher = build_webhook_dispatcher(tidings, settings, name)
        if metrics_port is not None:
            serve_metrics(metrics_port, dispatcher.metrics.registry, lambda: (True, {}))

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if is_embedded(tidings) if projections is None else projections:
            threading.Thread(
                target=follow_projections, args=(tidings, stop), name="projections", daemon=True
            ).start()
        err().print(f"webhooks {name} delivering (Ctrl-C to stop)")
        dispatcher.run(stop)
