"""``tidings events export | import``: the event log as JSONL (``eventstore.jsonl``)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TextIO

import typer

from infrastructure.bootstrap import event_store
from infrastructure.cli.output import JsonFlag, err, event_progress, print_data
from infrastructure.cli.projections import TaskProgress, catch_up_with_progress
from infrastructure.cli.runtime import CliError, opened_app
from infrastructure.eventstore import jsonl as events_io

app = typer.Typer(
    name="events",
    help="The event log as JSONL: export it, import it (replay fixtures, moves, backups).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@contextlib.contextmanager
def _output(target: str) -> Iterator[TextIO]:
    """stdout for ``-``; otherwise a temp file beside the target, renamed into place
    only when the export is complete."""
    if target == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise CliError(f"cannot write {target}: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            yield handle
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


@app.command("export")
def export(
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FILE|-", help="Where to write; - is stdout.")
    ] = "-",
) -> None:
    """Write every stored event as one JSON line, in log order: position, originatorId,
    originatorVersion, topic and the state as a JSON object. Streams in constant memory."""
    started = time.monotonic()
    with opened_app() as tidings:
        store = event_store(tidings)
        with _output(output) as handle:
            if output == "-":  # no bar beside data on the terminal
                written = events_io.export_events(store, handle)
            else:
                with event_progress() as bar:
                    progress = TaskProgress(bar, "export", total=store.head())
                    written = events_io.export_events(store, handle, on_page=progress)
    _summary(
        f"exported {written:,} events to {'stdout' if output == '-' else output}", written, started
    )


def _lines(source: str) -> Iterator[str]:
    if source == "-":
        # Bytes that are not UTF-8 become lone surrogates: refused with their line number.
        stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
        yield from events_io.read_lines(stdin)
        return
    try:
        with open(source, encoding="utf-8", errors="surrogateescape") as handle:
            yield from events_io.read_lines(handle)
    except OSError as error:
        raise CliError(f"cannot read {source}: {error.strerror or error}") from None


@app.command("import")
def import_(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="A JSONL export; - is stdin.")],
    append: Annotated[
        bool, typer.Option("--append", help="Allow a store that already holds events.")
    ] = False,
    chunk_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Events per atomic insert.")
    ] = events_io.CHUNK_SIZE,
    as_json: JsonFlag = False,
) -> None:
    """Append an export's events to this store — same streams, versions and order — then
    catch the projections up. Refuses a store that holds events unless --append.

    Every event is checked against its class (field types, storable values, sealed
    tokens of its own tenant only); a file is checked in full before anything is
    written, and the whole import is one transaction: a bad line or a conflict anywhere
    leaves the store as it was. Old event shapes are imported as they are and read
    through the upcasters.
    """
    with opened_app() as tidings:
        store = event_store(tidings)
        started = time.monotonic()
        try:
            if not append and (head := store.head()) > 0:
                raise events_io.StoreNotEmpty(head)
            with event_progress() as bar:
                total = None
                if source != "-":  # a file: check it all before writing anything
                    checking = TaskProgress(bar, "check")
                    total = events_io.check_lines(_counted(_lines(source), checking), store)
                    checking(total, total)
                progress = TaskProgress(bar, "import", total=total)
                imported = events_io.import_events(
                    store,
                    _lines(source),
                    append=append,
                    chunk_size=chunk_size,
                    checked=total is not None,
                    on_chunk=lambda done: progress(done, total or done),
                )
        except events_io.EventsIOError as error:
            raise CliError(f"import of {source}: {error}") from None
        _summary(f"imported {imported:,} events from {source}", imported, started)
        started = time.monotonic()
        applied = catch_up_with_progress(tidings)
        head = max((s.head for s in tidings.projections.status()), default=0)
    _summary(f"projections caught up: {applied:,} events applied", applied, started)
    if as_json:
        print_data({"imported": imported, "applied": applied, "head": head}, True)


def _counted(lines: Iterator[str], progress: TaskProgress, every: int = 5000) -> Iterator[str]:
    for number, line in enumerate(lines, start=1):
        if number % every == 0:
            progress(number, number)
        yield line


def _summary(what: str, count: int, started: float) -> None:
    seconds = time.monotonic() - started
    rate = f", {count / seconds:,.0f} events/s" if count and seconds > 0 else ""
    err().print(f"{what} in {seconds:.1f} s{rate}", highlight=False)
