"""``tidings projections status | run | rebuild | quarantine list`` (docs/projections.md).

``status`` counts each projection's quarantined events; ``quarantine list`` shows them
(projection, position, tenant, error). ``run`` is a loop of runner steps — one
transaction of up to ``projection_batch_size`` events per projection — so each batch is
logged and a SIGINT/SIGTERM is honoured between batches, never in the middle of one.
A database outage while following is logged and retried with backoff (1 s doubling to
30 s); with ``--once`` it is an error. An event a projection cannot apply is
quarantined by the runner, never fatal here.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

import typer
from prometheus_client import CollectorRegistry
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from application.app import App
from application.read_models import quarantined_item
from infrastructure.bootstrap import projection_runner
from infrastructure.cli.output import (
    JsonFlag,
    configure_logging,
    err,
    event_progress,
    out,
    print_data,
)
from infrastructure.cli.runtime import EXIT_USAGE, UNAVAILABLE, CliError, opened_app
from infrastructure.runtime.gc_policy import kept_heap
from infrastructure.runtime.metrics_http import serve_metrics
from projections.runner import ProjectionRunner

log = logging.getLogger("tidings.projections")

app = typer.Typer(
    name="projections",
    help="Read models: show their lag, follow the log, rebuild them.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

MAX_BACKOFF = 30.0


class TaskProgress:
    """A ``Progress`` callback (done, total) that moves one task of a rich display."""

    def __init__(self, bar: Progress, description: str, total: float | None = None) -> None:
        self.bar = bar
        self.task: TaskID = bar.add_task(description, total=total)
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        self.done = done
        self.bar.update(self.task, completed=done, total=max(total, done))


@app.command()
def status(as_json: JsonFlag = False) -> None:
    """Each projection's tracked position, the log's head, and the lag between them."""
    with opened_app(existing=True) as tidings:
        rows = tidings.projections.status()
    data = [
        {
            "name": s.name,
            "position": s.position,
            "head": s.head,
            "lag": s.lag,
            "quarantined": s.quarantined,
        }
        for s in rows
    ]
    if as_json:
        print_data(data, True)
        return
    out().print(status_table(data))


def status_table(data: list[dict[str, Any]]) -> Table:
    table = Table(title="projections", title_justify="left")
    table.add_column("name")
    for column in ("position", "head", "lag", "quarantined"):
        table.add_column(column, justify="right")
    for row in data:
        lag = int(row["lag"])
        held = int(row.get("quarantined", 0))
        table.add_row(
            str(row["name"]),
            f"{int(row['position']):,}",
            f"{int(row['head']):,}",
            f"[green]{lag:,}[/]" if lag == 0 else f"[yellow]{lag:,}[/]",
            f"{held:,}" if held == 0 else f"[red]{held:,}[/]",
        )
    return table


quarantine_app = typer.Typer(
    name="quarantine",
    help="Events a projection could not apply and set aside.",
    no_args_is_help=True,
)
app.add_typer(quarantine_app)


@quarantine_app.command("list")
def quarantine_list(
    name: Annotated[
        str | None, typer.Argument(help="Only this projection's; every one when omitted.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many.")] = 1000,
    as_json: JsonFlag = False,
) -> None:
    """The quarantined events, in log order: projection, position, tenant, topic and the
    error. A rebuild applies them again (after a fix they leave the list)."""
    with opened_app() as tidings:
        runner = projection_runner(tidings)
        if name is not None and name not in runner.projections:
            known = ", ".join(runner.projections)
            raise CliError(f"unknown projection {name!r}; known: {known}", EXIT_USAGE)
        found = runner.quarantined(name, limit)
    data = [quarantined_item(q) for q in found]
    if as_json:
        print_data(data, True)
        return
    table = Table(title=f"quarantined events ({len(data)})", title_justify="left")
    for column in ("projection", "position", "tenant", "topic", "error"):
        table.add_column(column, justify="right" if column == "position" else "left")
    for row in data:
        # Text cells: a tenant id or an error message is data, never rich markup.
        table.add_row(
            Text(str(row["projection"])),
            f"{row['position']:,}",
            Text(str(row["tenantId"] or "-")),
            Text(str(row["topic"])),
            Text(f"{row['errorClass']}: {row['errorMessage']}"),
        )
    out().print(table)


@app.command()
def run(
    once: Annotated[bool, typer.Option("--once", help="Catch up, then exit.")] = False,
    interval: Annotated[
        float, typer.Option(min=0.05, help="Seconds between polls when there is nothing new.")
    ] = 0.5,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="Serve /metrics (tidings_projection_quarantined) here."
        ),
    ] = None,
) -> None:
    """Follow the event log, applying new events to every read model, until SIGINT or
    SIGTERM. Each applied batch is logged on stderr as one key=value line.

    On PostgreSQL this is what keeps the read models current; run one or more beside
    the app (concurrent runners never apply an event twice).
    """
    configure_logging(logging.INFO)
    stop = threading.Event()
    with opened_app() as tidings, stop_on_signals(stop), kept_heap():
        runner = projection_runner(tidings)
        server = None
        if metrics_port is not None:
            registry = CollectorRegistry()
            registry.register(runner.metrics_collector())
            server = serve_metrics(metrics_port, registry, lambda: (True, {}))
        log.info(
            "event=started dialect=%s projections=%s once=%s interval=%s",
            runner.db.dialect,
            ",".join(runner.projections),
            once,
            interval,
        )
        try:
            applied = follow(runner, stop, interval, once=once)
        finally:
            if server is not None:
                server.shutdown()
        log.info("event=stopped applied=%d", applied)


def follow(
    runner: ProjectionRunner, stop: threading.Event, interval: float, *, once: bool = False
) -> int:
    """Apply batches until ``stop`` is set (or, with ``once``, until caught up)."""
    applied = 0
    backoff = 1.0
    while not stop.is_set():
        try:
            count = follow_round(runner, stop)
        except UNAVAILABLE as error:
            if once:
                raise
            log.warning("event=unavailable error=%s retry_in=%.0f", type(error).__name__, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
            continue
        backoff = 1.0
        applied += count
        if not count:
            if once:
                break
            stop.wait(interval)
    return applied


def follow_round(runner: ProjectionRunner, stop: threading.Event) -> int:
    applied = 0
    for projection in runner.projections.values():
        if stop.is_set():
            break
        started = time.monotonic()
        count = runner.step(projection)
        if not count:
            continue
        applied += count
        ms = (time.monotonic() - started) * 1000
        now = next(s for s in runner.status() if s.name == projection.name)
        log.info(
            "event=batch projection=%s applied=%d position=%d head=%d lag=%d ms=%.1f",
            projection.name,
            count,
            now.position,
            now.head,
            now.lag,
            ms,
        )
    return applied


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop``; a second one interrupts at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("event=stopping signal=%s", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@app.command()
def rebuild(
    name: Annotated[
        str | None, typer.Argument(help="The projection to rebuild; every one when omitted.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Rebuild read models from position 0 into fresh tables while the old ones keep
    serving, then swap them in. Shows a progress bar with events/s and the ETA."""
    with opened_app() as tidings, kept_heap():
        known = [s.name for s in tidings.projections.status()]
        if name is not None and name not in known:
            raise CliError(f"unknown projection {name!r}; known: {', '.join(known)}", EXIT_USAGE)
        results = []
        for target in [name] if name is not None else known:
            started = time.monotonic()
            with event_progress() as bar:
                progress = TaskProgress(bar, f"rebuild {target}")
                tidings.projections.rebuild(target, progress)
            seconds = time.monotonic() - started
            results.append({"name": target, "events": progress.done, "seconds": round(seconds, 3)})
            err().print(
                f"rebuilt {target}: {progress.done:,} events in {seconds:.2f} s"
                f" ({progress.done / max(seconds, 1e-9):,.0f} events/s)",
                highlight=False,
            )
    if as_json:
        print_data(results, True)


def catch_up_with_progress(tidings: App) -> int:
    """``catch_up()`` batch by batch, with a progress bar per projection."""
    runner = projection_runner(tidings)
    lag = {s.name: s.lag for s in runner.status()}
    applied = 0
    with event_progress() as bar:
        for projection in runner.projections.values():
            progress = TaskProgress(bar, f"project {projection.name}", total=lag[projection.name])
            while count := runner.step(projection):
                applied += count
                progress(progress.done + count, lag[projection.name])
    return applied
