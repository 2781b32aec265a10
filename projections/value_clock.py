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
from projections.base import index_name

# (tenant, entity name, entity id, key, definition id, generation)
ClockKey = tuple[str, str, str, str, str, int]


class ValueClockSql:
    def __init__(self, dialect: Dialect, table: str) -> None:
        self.pg = dialect == "postgresql"
        self.table = table
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {table} ("
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            " field_key TEXT NOT NULL, definition_id TEXT NOT NULL,"
            " generation INTEGER NOT NULL, set_at BIGINT NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id, field_key, definition_id,"
            " generation))",
            # The sweeper's walk of one definition, in its order: a range scan, no sort.
            f"CREATE INDEX {index_name(table, 'due')} ON {table} (definition_id, set_at,"
            " tenant_id, entity_name, entity_id, field_key, generation)",
        ]
        where = (
            "tenant_id = ? AND entity_name = ? AND entity_id = ? AND field_key = ?"
            " AND definition_id = ? AND generation = ?"
        )
        if self.pg:
            self.stop = (
                f"DELETE FROM {table} AS c USING unnest(?::text[], ?::text[], ?::text[],"
                " ?::text[], ?::text[], ?::int[]) AS u(t, e, i, k, d, g)"
                " WHERE c.tenant_id = u.t AND c.entity_name = u.e AND c.entity_id = u.i"
                " AND c.field_key = u.k AND c.definition_id = u.d AND c.generation = u.g"
            )
            self.start = (
                f"INSERT INTO {table} (tenant_id, entity_name, entity_id, field_key,"
                " definition_id, generation, set_at) SELECT * FROM unnest(?::text[], ?::text[],"
                " ?::text[], ?::text[], ?::text[], ?::int[], ?::bigint[])"
                " ON CONFLICT (tenant_id, entity_name, entity_id, field_key, definition_id,"
                " generation) DO UPDATE SET set_at = excluded.set_at"
            )
        else:
            self.stop = f"DELETE FROM {table} WHERE {where}"
            self.start = (
                f"INSERT INTO {table} (tenant_id, entity_name, entity_id, field_key,"
                " definition_id, generation, set_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, entity_name, entity_id, field_key, definition_id,"
                " generation) DO UPDATE SET set_at = excluded.set_at"
            )
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
