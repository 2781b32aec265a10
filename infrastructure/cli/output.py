"""Output: data on stdout (pretty with rich, or compact JSON for scripts), everything
else — progress, narration, errors, logs — on stderr so stdout stays parseable."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from application.result import Error

JsonFlag = Annotated[bool, typer.Option("--json", help="Compact JSON on stdout, for scripts.")]
# The options every long-running process command (worker, webhooks run) takes.
WorkerIdOption = Annotated[
    str | None,
    typer.Option("--worker-id", help="This process's name in the fleet (default: host-pid)."),
]
MetricsPortOption = Annotated[
    int | None,
    typer.Option("--metrics-port", help="Serve /metrics and /healthz on 127.0.0.1:PORT."),
]
ProjectionsOption = Annotated[
    bool | None,
    typer.Option(
        "--projections/--no-projections",
        help="Keep read models current in this process (default: on for SQLite).",
    ),
]


@cache
def out() -> Console:
    return Console(soft_wrap=True)


@cache
def err() -> Console:
    return Console(stderr=True)


def compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def print_data(data: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(compact(data) + "\n")
        sys.stdout.flush()
    else:
        out().print_json(data=data)


def error_line(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def describe_error(error: Error) -> str:
    """``404 not_found: field contact.x not found {"details": …}`` on one line."""
    text = f"{error.status} {error.code}: {error.message}"
    return f"{text} {compact(error.details)}" if error.details else text


class RateColumn(ProgressColumn):
    """Events per second, from rich's own speed estimate."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("? events/s", style="progress.data.speed")
        return Text(f"{speed:,.0f} events/s", style="progress.data.speed")


def event_progress() -> Progress:
    """A progress display for event counts: bar, n/total, events/s, elapsed, ETA."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err(),
        # Scripts (no terminal) get the summary lines only, not a final bar render.
        disable=not err().is_terminal,
    )


class KeyValueFormatter(logging.Formatter):
    """``ts=… level=… logger=… <message>``; messages are key=value pairs already."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = (
            f"ts={ts.replace('+00:00', 'Z')} level={record.levelname.lower()} "
            f"logger={record.name} {record.getMessage()}"
        )
        if record.exc_info and record.exc_info[0] is not None:
            line += f" error={record.exc_info[0].__name__}"
        return line


def configure_logging(level: int = logging.WARNING) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
