"""The event log on eventsourcing's recorders: the projections' side of the event store.

Positions are the recorder's notification ids, in commit order (``recorder``), so a
reader that asks for ``position > last`` never skips an event. ``page`` reads the rows
as plain tuples in one round trip and leaves in the database the states of topics the
codec knows and the reader does not want (NULL); ``scan`` and ``page`` turn an event
that cannot be decoded into an ``Unreadable`` entry in its place (the projections
quarantine it), naming its tenant when a lenient reader finds one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, InterfaceError, OperationalError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from application.errors import StoreUnavailable, UnreadableEvent
from application.ports import LogPage, Recorded, Unreadable
from infrastructure.eventstore.codec import EventCodec, UnknownTopic
from infrastructure.eventstore.sqlite_errors import translated


def sqlite_read(
    recorder: SQLiteApplicationRecorder, statement: str, params: Sequence[Any]
) -> list[Any]:
    """The rows (plain tuples) of one statement, in autocommit: a single statement is
    its own snapshot, so the library's BEGIN and ROLLBACK around it add nothing but
    two statements to every inline catch-up and every read of a stream."""
    with recorder.datastore.get_connection(commit=False) as conn, translated():
        cursor = conn.cursor().sqlite_cursor
        try:
            cursor.row_factory = None
            cursor.execute(statement, params)
            return cursor.fetchall()
        finally:
            cursor.close()


def _tenant_of(state: bytes) -> str | None:
    """The tenant an undecodable state names, if a lenient reader can find one."""
    try:
        data = json.loads(state)
    except (ValueError, RecursionError):
        return None
    tenant = data.get("tenant_id") if isinstance(data, dict) else None
    return tenant if isinstance(tenant, str) else None


class RecorderEventLog:
    """Implements the ``EventLog`` port (``RecorderEventStore`` adds the store's)."""

    def __init__(self, recorder: ApplicationRecorder, codec: EventCodec) -> None:
        self.recorder = recorder
        self.codec = codec

    def read(self, after: int, limit: int) -> list[Recorded]:
        return [
            Recorded(
                n.id, self.codec.decode(n.originator_id, n.originator_version, n.topic, n.state)
            )
            for n in self.read_raw(after, limit)
        ]

    def scan(self, after: int, limit: int) -> list[Recorded | Unreadable]:
        entries: list[Recorded | Unreadable] = []
        for n in self.read_raw(after, limit):
            try:
                event = self.codec.decode(n.originator_id, n.originator_version, n.topic, n.state)
            except (UnreadableEvent, UnknownTopic) as error:
                entries.append(Unreadable(n.id, n.topic, _tenant_of(n.state), error))
            else:
                entries.append(Recorded(n.id, event))
        return entries

    def page(self, after: int, limit: int, topics: frozenset[str] | None) -> LogPage:
        """Rows come as plain tuples; a state is fetched only when its topic is wanted
        (or unknown to the codec), and decoded only then."""
        try:
            rows = self._page_rows(after, limit, topics)
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None
        decode, known = self.codec.decode, self.codec.classes
        entries: list[Recorded | Unreadable] = []
        for position, originator_id, version, topic, state in rows:
            if topics is not None and topic not in topics and topic in known:
                continue
            try:
                event = decode(originator_id, version, topic, state)
            except (UnreadableEvent, UnknownTopic) as error:
                entries.append(Unreadable(position, topic, _tenant_of(state), error))
            else:
                entries.append(Recorded(position, event))
        return LogPage(entries, rows[-1][0] if rows else after, len(rows))

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _page_rows(
        self, after: int, limit: int, topics: frozenset[str] | None
    ) -> list[tuple[int, Any, int, str, bytes]]:
        recorder = self.recorder
        # States of topics the codec knows and nobody wants stay in the database (NULL).
        skipped = sorted(self.codec.classes.keys() - topics) if topics is not None else []
        if isinstance(recorder, PostgresApplicationRecorder):
            query = SQL(
                "SELECT notification_id, originator_id, originator_version, topic,"
                " CASE WHEN topic = ANY(%s) THEN NULL ELSE state END"
                " FROM {schema}.{table} WHERE notification_id > %s"
                " ORDER BY notification_id LIMIT %s"
            ).format(
                schema=Identifier(recorder.datastore.schema),
                table=Identifier(recorder.events_table_name),
            )
            with (
                recorder.datastore.get_connection() as conn,
                conn.cursor(row_factory=tuple_row) as curs,
            ):
                curs.execute(query, (skipped, after, limit), prepare=True)
                return curs.fetchall()
        if isinstance(recorder, SQLiteApplicationRecorder):
            # In-process: no bytes travel, the state is read as it is.
            statement = (
                "SELECT rowid, originator_id, originator_version, topic, state"
                f" FROM {recorder.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?"
            )
            return sqlite_read(recorder, statement, (after, limit))
        raise TypeError(f"no paged read for {type(recorder).__name__}")

    def read_raw(self, after: int, limit: int) -> list[Any]:
        try:
            return list(self.recorder.select_notifications(after + 1, limit))
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None

    def head(self) -> int:
        try:
            return self.recorder.max_notification_id() or 0
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None
