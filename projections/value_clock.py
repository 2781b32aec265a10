"""When each custom-field value was last set: the table the retention sweeper reads.

``value_clock``: one row per (tenant, entity name, entity id, key, definition id,
generation) whose value was set and not cleared, expired or anonymized since, with
``set_at`` (microseconds since the epoch, from the set event's time). It follows the
value events in log order, in runs like the values table (``projections.value_runs``):
the last op of a run per row wins, then one statement removes the rows a clear or an
expiry ended and one upserts the rows a set started (PostgreSQL: over arrays; SQLite:
``executemany``). Rows are not checked against the definitions here: the sweeper joins
the live definitions, so a row of a dead generation is never swept (and a definition's
delete removes its rows, every generation, in one statement).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from application.ports import Dialect, SqlCursor
from domain.retention import micros

# (tenant, entity name, entity id, key, definition id, generation)
ClockKey = tuple[str, str, str, str, str, int]


class ValueClockSql:
    def __init__(self, dialect: Dialect, table: str) -> None:
        self.pg = dialect == "postgresql"
        self.table = table
        # Keyed by definition first: the sweeper walks one definition's live generation
        # in key order along the primary key (a range scan; the set time is checked on
        # the way), and a definition's delete removes a key prefix. One B-tree per row
        # (SQLite: WITHOUT ROWID), so keeping the clock costs a rebuild little.
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {table} ("
            " definition_id TEXT NOT NULL, generation INTEGER NOT NULL,"
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            " field_key TEXT NOT NULL, set_at BIGINT NOT NULL,"
            " PRIMARY KEY (definition_id, generation, tenant_id, entity_name, entity_id,"
            f" field_key)){'' if self.pg else ' WITHOUT ROWID'}",
        ]
        conflict = (
            " ON CONFLICT (definition_id, generation, tenant_id, entity_name, entity_id,"
            " field_key) DO UPDATE SET set_at = excluded.set_at"
        )
        columns = (
            "(tenant_id, entity_name, entity_id, field_key, definition_id, generation, set_at)"
        )
        if self.pg:
            self.stop = (
                f"DELETE FROM {table} AS c USING unnest(?::text[], ?::text[], ?::text[],"
                " ?::text[], ?::text[], ?::int[]) AS u(t, e, i, k, d, g)"
                " WHERE c.definition_id = u.d AND c.generation = u.g AND c.tenant_id = u.t"
                " AND c.entity_name = u.e AND c.entity_id = u.i AND c.field_key = u.k"
            )
            self.start = (
                f"INSERT INTO {table} {columns} SELECT * FROM unnest(?::text[], ?::text[],"
                " ?::text[], ?::text[], ?::text[], ?::int[], ?::bigint[])" + conflict
            )
        else:
            self.stop = (
                f"DELETE FROM {table} WHERE tenant_id = ? AND entity_name = ?"
                " AND entity_id = ? AND field_key = ? AND definition_id = ? AND generation = ?"
            )
            self.start = f"INSERT INTO {table} {columns} VALUES (?, ?, ?, ?, ?, ?, ?)" + conflict
        self.forget_definition = f"DELETE FROM {table} WHERE definition_id = ?"


class ClockRun:
    """The clock ops of one run of value events (set time, or None: stopped)."""

    def __init__(self) -> None:
        self.ops: dict[ClockKey, int | None] = {}

    def set(self, key: ClockKey, at: datetime) -> None:
        self.ops[key] = micros(at)

    def stop(self, key: ClockKey) -> None:
        self.ops[key] = None

    def flush(self, cur: SqlCursor, sql: ValueClockSql) -> None:
        if not self.ops:
            return
        stopped = [key for key, at in self.ops.items() if at is None]
        started = [(*key, at) for key, at in self.ops.items() if at is not None]
        self.ops = {}
        if sql.pg:
            if stopped:
                cur.execute(sql.stop, _columns(stopped))
            if started:
                cur.execute(sql.start, _columns(started))
            return
        if stopped:
            cur.executemany(sql.stop, stopped)
        if started:
            cur.executemany(sql.start, started)


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    return [list(column) for column in zip(*rows, strict=True)]
