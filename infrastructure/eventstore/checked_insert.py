"""A group commit's insert that first checks the streams its callers decided on.

A caller that decided on state it did not write (a value validated under a cached
definition) names those streams with the versions it read. The check runs inside the
write transaction, after the log's write lock is taken (PostgreSQL: the table lock;
SQLite: ``BEGIN IMMEDIATE``), so no writer can move a checked stream between the check
and the commit: one query reads the heads of every checked stream of the batch, and only
the callers whose reads still hold have their events inserted. A caller is stale too
when another caller of the same batch writes a stream it checked (its events may come
first in the log). Stale callers write nothing and decide again on fresh state.

Every append of the store takes this path (with nothing to check, it is the plain
insert). On PostgreSQL it is one call of our own database function (lock, ``NOTIFY``,
check and insert in one statement: one round trip and little client work); on SQLite
one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor
from eventsourcing.utils import retry

from infrastructure.eventstore.sqlite_errors import translated
from infrastructure.eventstore.typed_array import TypedArrayPostgresRecorder


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """One caller's encoded events, and the streams (with versions) it decided on."""

    events: Sequence[StoredEvent]
    expected: Mapping[UUID, int] = field(default_factory=dict)
    inline: bool = False  # its caller waits for the read models to catch up


def stale_appends(appends: Sequence[PendingAppend], heads: Mapping[UUID, int] | None) -> list[bool]:
    """Which appends rely on a stream that moved: its head is not the version they read
    (a stream without events is at 0; ``heads`` None: not checked here), or another
    append of the batch writes it."""
    # Each written stream -> the one append that writes it, or -1 when several do. (Every
    # caller of a set names three streams: no sets made per stream, no generator.)
    writers: dict[UUID | str, int] = {}
    for n, append in enumerate(appends):
        for event in append.events:
            stream = event.originator_id
            writers[stream] = n if writers.get(stream, n) == n else -1
    stale: list[bool] = []
    for n, append in enumerate(appends):
        gone = False
        for stream, version in append.expected.items():
            if writers.get(stream, n) != n or (
                heads is not None and heads.get(stream, 0) != version
            ):
                gone = True
                break
        stale.append(gone)
    return stale


def insert_checked(recorder: ApplicationRecorder, appends: Sequence[PendingAppend]) -> list[bool]:
    """Insert, in one transaction, the events of every append whose checked streams
    still hold; answer which appends were stale (nothing of theirs is written). Raises
    the recorder's ``IntegrityError`` when a (stream, version) is taken: then nothing
    is written."""
    stale: list[bool]
    if isinstance(recorder, TypedArrayPostgresRecorder):
        stale = _postgres(recorder, appends)
        return stale
    if isinstance(recorder, SQLiteApplicationRecorder):
        stale = _sqlite(recorder, appends)
        return stale
    raise TypeError(f"no checked insert for {type(recorder).__name__}")


def _checked_streams(appends: Sequence[PendingAppend]) -> list[UUID]:
    return sorted({stream for append in appends for stream in append.expected})


def _kept(appends: Sequence[PendingAppend], stale: list[bool]) -> list[StoredEvent]:
    return [
        e for append, gone in zip(appends, stale, strict=True) if not gone for e in append.events
    ]


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def _postgres(recorder: TypedArrayPostgresRecorder, appends: Sequence[PendingAppend]) -> list[bool]:
    # Callers made stale by the batch itself never reach the database; the others
    # are checked there, in the insert's own statement.
    stale = stale_appends(appends, None)
    expected = [
        (n, stream, version)
        for n, append in enumerate(appends)
        if not stale[n]
        for stream, version in append.expected.items()
    ]
    events = [(n, e) for n, append in enumerate(appends) if not stale[n] for e in append.events]
    if not events:
        return stale
    for caller in recorder.insert_checked(expected, events):
        stale[caller] = True
    return stale


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def _sqlite(recorder: SQLiteApplicationRecorder, appends: Sequence[PendingAppend]) -> list[bool]:
    streams = _checked_streams(appends)
    table = recorder.events_table_name
    with recorder.datastore.get_connection(commit=True) as conn, translated():
        cursor: SQLiteCursor = conn.cursor()
        # IMMEDIATE: the write lock before the check's read (a deferred transaction's
        # snapshot could not be upgraded after another process's write).
        cursor.execute("BEGIN IMMEDIATE")
        try:
            heads: dict[UUID, int] = {}
            for at in range(0, len(streams), 400):  # SQLite's bound-variable limit
                chunk = streams[at : at + 400]
                cursor.execute(
                    f"SELECT originator_id, max(originator_version) FROM {table}"
                    f" WHERE originator_id IN ({','.join('?' * len(chunk))})"
                    " GROUP BY originator_id",
                    [s.hex for s in chunk],
                )
                heads |= {UUID(r[0]): r[1] for r in cursor.fetchall()}
            stale = stale_appends(appends, heads)
            events = _kept(appends, stale)
            if events:
                # One executemany (the library's insert runs one statement per event
                # to collect notification ids, which nothing here reads).
                cursor.executemany(
                    recorder.insert_events_statement,
                    [
                        (
                            e.originator_id.hex
                            if isinstance(e.originator_id, UUID)
                            else e.originator_id,
                            e.originator_version,
                            e.topic,
                            e.state,
                        )
                        for e in events
                    ],
                )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            cursor.sqlite_cursor.close()
    return stale
