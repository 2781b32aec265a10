"""eventsourcing's PostgreSQL recorder with a batch inserted as four typed arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier


class TypedArrayPostgresRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL recorder, inserting a batch as four typed arrays.

    Its own insert passes one array of a composite type, which psycopg dumps as text:
    every state's bytes travel as hex inside a composite literal that the server parses
    again (docs/decisions/typed-array-append.md). The rest is eventsourcing's, unchanged:
    the same transaction, lock (insert order = commit order), NOTIFY, RETURNING of
    notification ids and error translation."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self._insert_arrays = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)"
            " SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %b::bytea[])"
            " RETURNING notification_id"
        ).format(schema=Identifier(datastore.schema), table=Identifier(events_table_name))
        # The checked insert (checked_insert.py) in one statement: the callers whose
        # expected heads do not hold, and the events of every other caller inserted.
        # Every part of the statement sees the snapshot taken after the table lock.
        self._insert_checked = SQL(
            "WITH expected AS (SELECT * FROM unnest(%s::int[], %s::uuid[], %s::bigint[])"
            " AS x(caller, id, version)),"
            " stale AS (SELECT DISTINCT x.caller FROM expected x WHERE coalesce(("
            "SELECT max(e.originator_version) FROM {schema}.{table} e"
            " WHERE e.originator_id = x.id), 0) <> x.version),"
            " inserted AS (INSERT INTO {schema}.{table}"
            " (originator_id, originator_version, topic, state)"
            " SELECT r.id, r.version, r.topic, r.state FROM unnest("
            "%s::int[], %s::uuid[], %s::bigint[], %s::text[], %b::bytea[])"
            " AS r(caller, id, version, topic, state)"
            " WHERE r.caller NOT IN (SELECT caller FROM stale) RETURNING 1)"
            " SELECT caller FROM stale"
        ).format(schema=Identifier(datastore.schema), table=Identifier(events_table_name))

    def _insert_stored_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        self._lock_table(curs)
        self._notify_channel(curs)
        self.insert_arrays(curs, stored_events)

    def insert_checked(
        self,
        curs: Cursor[DictRow],
        expected: Sequence[tuple[int, UUID, int]],
        events: Sequence[tuple[int, StoredEvent]],
    ) -> None:
        """Queue the checked insert (``expected``: (caller, stream, version) triples;
        ``events``: (caller, event) pairs); its rows are the stale callers."""
        curs.execute(
            self._insert_checked,
            (
                [caller for caller, _, _ in expected],
                [stream for _, stream, _ in expected],
                [version for _, _, version in expected],
                [caller for caller, _ in events],
                [e.originator_id for _, e in events],
                [e.originator_version for _, e in events],
                [e.topic for _, e in events],
                [e.state for _, e in events],
            ),
            prepare=True,
        )

    def insert_arrays(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent]) -> None:
        """The insert alone: the caller holds the table lock and has notified."""
        curs.execute(
            self._insert_arrays,
            (
                [e.originator_id for e in stored_events],
                [e.originator_version for e in stored_events],
                [e.topic for e in stored_events],
                [e.state for e in stored_events],
            ),
            prepare=True,
        )
