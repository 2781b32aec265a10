"""eventsourcing's PostgreSQL recorder with a batch inserted as four typed arrays."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, InternalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier, Literal

from infrastructure.sql.array_literal import plain, quoted

CHECKED_INSERT_FUNCTION = "tidings_checked_insert_v1"

# Every part of the insert's statement sees the snapshot taken after the table lock
# (a plpgsql statement takes its own): a head that moved is seen, and a caller with a
# stale head has nothing of its own inserted. The order of the inserted rows is the
# order of the arrays (one insert, as the library's own).
CREATE_CHECKED_INSERT = """
CREATE OR REPLACE FUNCTION {schema}.{function}(
    x_caller int[], x_id uuid[], x_version bigint[],
    r_caller int[], r_id uuid[], r_version bigint[], r_topic text[], r_state bytea[]
) RETURNS SETOF int LANGUAGE plpgsql AS $body$
BEGIN
    SET LOCAL lock_timeout = {lock_timeout};
    LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE;
    NOTIFY {channel};
    RETURN QUERY
    WITH expected AS (
        SELECT * FROM unnest(x_caller, x_id, x_version) AS x(caller, id, version)
    ), stale AS (
        SELECT DISTINCT x.caller FROM expected x WHERE coalesce((
            SELECT max(e.originator_version) FROM {schema}.{table} e
            WHERE e.originator_id = x.id), 0) <> x.version
    ), inserted AS (
        INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)
        SELECT r.id, r.version, r.topic, r.state
        FROM unnest(r_caller, r_id, r_version, r_topic, r_state)
            AS r(caller, id, version, topic, state)
        WHERE r.caller NOT IN (SELECT caller FROM stale)
        RETURNING 1
    )
    SELECT caller FROM stale;
END
$body$
"""


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
        # The checked insert (checked_insert.py) as one function call: the lock, the
        # NOTIFY, the check and the insert in the call's own (autocommit) transaction,
        # so one statement and one round trip a batch. Its rows are the stale callers.
        names = {
            "schema": Identifier(datastore.schema),
            "table": Identifier(events_table_name),
            "function": Identifier(CHECKED_INSERT_FUNCTION),
            "channel": Identifier(self.channel_name),
        }
        self._create_checked_insert = SQL(CREATE_CHECKED_INSERT).format(
            lock_timeout=Literal(f"{datastore.lock_timeout}s"), **names
        )
        self._call_checked_insert = (
            SQL(
                "SELECT stale FROM {schema}.{function}("
                "%s::int[], %s::uuid[], %s::bigint[],"
                " %s::int[], %s::uuid[], %s::bigint[], %s::text[], %b::bytea[]) AS stale"
            )
            .format(**names)
            .as_string()
        )

    def create_table(self) -> None:
        super().create_table()
        # CREATE OR REPLACE races with itself when several processes start at once
        # ("tuple concurrently updated"): a function that exists is left as it is.
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                "SELECT to_regproc(quote_ident(%s) || '.' || quote_ident(%s)) IS NOT NULL"
                " AS present",
                (self.datastore.schema, CHECKED_INSERT_FUNCTION),
            )
            row = curs.fetchone()
            if row is not None and row["present"]:
                return
        with (
            contextlib.suppress(InternalError, IntegrityError),
            self.datastore.transaction(commit=True) as curs,
        ):
            curs.execute(self._create_checked_insert)

    def insert_checked(
        self,
        expected: Sequence[tuple[int, UUID, int]],
        events: Sequence[tuple[int, StoredEvent]],
    ) -> list[int]:
        """Insert the events of every caller whose expected heads hold (``expected``:
        (caller, stream, version); ``events``: (caller, event)); the stale callers."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                self._call_checked_insert,
                (
                    plain(caller for caller, _, _ in expected),
                    plain(stream for _, stream, _ in expected),
                    plain(version for _, _, version in expected),
                    plain(caller for caller, _ in events),
                    plain(e.originator_id for _, e in events),
                    plain(e.originator_version for _, e in events),
                    quoted(e.topic for _, e in events),
                    [e.state for _, e in events],
                ),
                prepare=True,
            )
            return [row["stale"] for row in curs.fetchall()]

    def _insert_stored_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        self._lock_table(curs)
        self._notify_channel(curs)
        self.insert_arrays(curs, stored_events)

    def insert_arrays(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent]) -> None:
        """The insert alone: the caller holds the table lock and has notified."""
        curs.execute(
            self._insert_arrays,
            (
                plain(e.originator_id for e in stored_events),
                plain(e.originator_version for e in stored_events),
                quoted(e.topic for e in stored_events),
                [e.state for e in stored_events],
            ),
            prepare=True,
        )
