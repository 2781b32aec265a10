"""The custom-fields read model: active definitions and each entity's values.

Tables (names via ``tables`` so a rebuild can build them under shadow names):

- ``definitions``: one row per (tenant or ``system``, entity, key) with its current
  generation and whether it is active; ``body`` is the definition as queries show it.
- ``entity_values``: one row per (tenant, entity name, entity id); ``fields`` is a JSON
  object key -> cell (jsonb on PostgreSQL). A cell is ``{"s": sealed value, "d": keyed
  digest}`` as the event carries them: the read model holds no plaintext, and equality
  filters compare digests (``application.custom_fields.sealing``). ``version`` is the
  entity stream's version the row reflects (the retention sweeper appends after it).

- ``value_clock``: when each live value was last set, for the retention sweeper
  (``projections.value_clock``); a definition's ``retention`` is in its row
  (``keep_for``, ``retention_action``; NULL: kept for ever).

A value event (set, clear, expiry) lands only if its definition is active at the
value's generation — a check inside the same statement as the write. A delete removes
the key from every affected row with one set-based UPDATE (jsonb ``-`` /
``json_remove``).

This module writes them; ``projections.custom_fields_reader`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from application.ports import Dialect, Recorded, SqlCursor
from application.users import SYSTEM_TENANT_ID
from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueExpired,
    CustomFieldValueSet,
)
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
    definition_id,
)
from projections.base import index_name, shadow_tables
from projections.value_clock import ClockRun, ValueClockSql
from projections.value_runs import ValueOp, ValueRunSql, write_run
from projections.value_runs import path as _path

TABLES = {
    "definitions": "cf_definitions",
    "entity_values": "cf_entity_values",
    "value_clock": "cf_value_clock",
}


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cell(sealed: str, digest: str) -> str:
    # The JSON text of {"s": sealed, "d": digest}, built from two string encodings: a
    # rebuild writes one per value event.
    return f'{{"s":{encode_basestring(sealed)},"d":{encode_basestring(digest)}}}'


def _body(event: FieldDefinitionDefined | FieldDefinitionUpdated, scope: str) -> str:
    field = dict(event.field)
    if event.field_access is not None:
        field["fieldAccess"] = event.field_access
    return compact_json(
        {
            "entityName": event.entity_name,
            "fieldKey": event.field_key,
            "scope": scope,
            "field": field,
            "required": event.required,
            "searchable": event.searchable,
            "displayOrder": event.display_order,
            "label": event.label,
            **({} if event.retention is None else {"retention": event.retention}),
        }
    )


def _retention(event: FieldDefinitionDefined | FieldDefinitionUpdated) -> tuple[Any, Any]:
    """The (keep_for, retention_action) columns of a definition event."""
    retention = event.retention
    return (None, None) if retention is None else (retention["keepFor"], retention["action"])


class _Sql:
    """The few statements whose spelling differs between the two dialects."""

    def __init__(self, dialect: Dialect, definitions: str, values: str, clock: str) -> None:
        pg = dialect == "postgresql"
        json_type = "JSONB" if pg else "TEXT"
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {definitions} ("
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, field_key TEXT NOT NULL,"
            " definition_id TEXT NOT NULL, generation INTEGER NOT NULL,"
            " active INTEGER NOT NULL, searchable INTEGER NOT NULL,"
            " display_order INTEGER NOT NULL, body TEXT NOT NULL,"
            " keep_for TEXT, retention_action TEXT,"
            " PRIMARY KEY (tenant_id, entity_name, field_key))",
            f"CREATE INDEX {index_name(definitions, 'id')} ON {definitions} (definition_id)",
            f"CREATE TABLE IF NOT EXISTS {values} ("
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            f" fields {json_type} NOT NULL, version BIGINT,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id))",
        ]
        # Values are written in runs (``projections.value_runs``), with their set times.
        self.run = ValueRunSql(dialect, definitions, values)
        self.clock = ValueClockSql(dialect, clock)
        self.create += self.clock.create
        if pg:
            self.cascade = (
                f"UPDATE {values} SET fields = fields - ?::text"
                " WHERE entity_name = ? AND jsonb_exists(fields, ?::text)"
            )
        else:
            self.cascade = (
                f"UPDATE {values} SET fields = json_remove(fields, ?)"
                " WHERE entity_name = ? AND json_type(fields, ?) IS NOT NULL"
            )
        self.pg = pg


class _ValueWrites:
    """A run of value writes (every value in log order, a set's cell or None for a
    clear), settled and written together at the next definition event or the batch's
    end (``projections.value_runs``)."""

    def __init__(self, cur: SqlCursor, sql: _Sql) -> None:
        self.cur = cur
        self.sql = sql
        self.ops: list[ValueOp] = []
        self.clock = ClockRun()

    def flush(self) -> None:
        if self.ops:
            write_run(self.cur, self.sql.run, self.ops)
            self.ops = []
        self.clock.flush(self.cur, self.sql.clock)

    def add(
        self, event: CustomFieldValueSet | CustomFieldValueCleared | CustomFieldValueExpired
    ) -> None:
        """A value event: its op on the values table and on the clock."""
        cell = None
        if isinstance(event, CustomFieldValueSet):
            cell = _cell(event.sealed, event.digest)
        elif isinstance(event, CustomFieldValueExpired) and event.sealed is not None:
            cell = _cell(event.sealed, event.digest or "")
        key = (
            event.tenant_id,
            event.entity_name,
            event.entity_id,
            event.field_key,
            event.definition_id,
            event.generation,
        )
        self.ops.append(
            (*key[:4], cell, event.definition_id, event.generation, event.originator_version)
        )
        if isinstance(event, CustomFieldValueSet):
            self.clock.set(key, event.timestamp)
        else:  # cleared, expired or anonymized: never swept again
            self.clock.stop(key)


VALUE_EVENTS = (CustomFieldValueSet, CustomFieldValueCleared, CustomFieldValueExpired)
VALUE_TOPICS = frozenset(cls.TOPIC for cls in VALUE_EVENTS)
TOPICS = VALUE_TOPICS | {
    FieldDefinitionDefined.TOPIC,
    FieldDefinitionUpdated.TOPIC,
    FieldDefinitionDeleted.TOPIC,
}


class CustomFieldsProjection:
    name = "custom_fields"
    topics = TOPICS  # the runner hands it these events only

    def __init__(self, tables: Mapping[str, str] = TABLES, name: str = "custom_fields") -> None:
        self.tables = dict(tables)
        self.name = name
        self._sql: dict[Dialect, _Sql] = {}

    def shadow(self) -> CustomFieldsProjection:
        return CustomFieldsProjection(shadow_tables(self.tables), name=f"{self.name}__next")

    def sql(self, dialect: Dialect) -> _Sql:
        if dialect not in self._sql:
            tables = self.tables
            self._sql[dialect] = _Sql(
                dialect, tables["definitions"], tables["entity_values"], tables["value_clock"]
            )
        return self._sql[dialect]

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        for statement in self.sql(dialect).create:
            cur.execute(statement)

    def predates_retention(self, cur: SqlCursor, dialect: Dialect) -> bool:
        """Whether the tables were created before retention: the definitions lack the
        retention columns, the value clock is missing, or the values lack the stream
        version the sweeper appends after. Those (each value's set time, each entity's
        version) can only come from the log, so such a read model is rebuilt, not altered."""
        definitions, clock = self.tables["definitions"], self.tables["value_clock"]
        values = self.tables["entity_values"]
        if dialect == "postgresql":
            cur.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name IN (?, ?, ?)",
                (definitions, clock, values),
            )
            columns = {(str(t), str(c)) for t, c in cur.fetchall()}
            has_clock = any(table == clock for table, _ in columns)
        else:
            columns = set()
            for table in (definitions, values):
                cur.execute(f"PRAGMA table_info({table})")
                columns |= {(table, str(row[1])) for row in cur.fetchall()}
            cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (clock,))
            has_clock = cur.fetchone() is not None
        needed = {
            (definitions, "keep_for"),
            (definitions, "retention_action"),
            (values, "version"),
        }
        return not has_clock or not needed <= columns

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        sql = self.sql(dialect)
        definitions = self.tables["definitions"]
        writes = _ValueWrites(cur, sql)
        for recorded in batch:
            event = recorded.event
            if isinstance(event, VALUE_EVENTS):
                writes.add(event)
                continue
            writes.flush()  # a definition event comes after every earlier value
            if isinstance(event, FieldDefinitionDefined):
                cur.execute(
                    f"INSERT INTO {definitions} (tenant_id, entity_name, field_key,"
                    " definition_id, generation, active, searchable, display_order, body,"
                    " keep_for, retention_action) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (tenant_id, entity_name, field_key) DO UPDATE SET"
                    " generation = excluded.generation, active = 1,"
                    " searchable = excluded.searchable,"
                    " display_order = excluded.display_order, body = excluded.body,"
                    " keep_for = excluded.keep_for,"
                    " retention_action = excluded.retention_action",
                    (
                        event.tenant_id,
                        event.entity_name,
                        event.field_key,
                        str(definition_id(event.tenant_id, event.entity_name, event.field_key)),
                        event.generation,
                        int(event.searchable),
                        event.display_order,
                        _body(event, event.scope),
                        *_retention(event),
                    ),
                )
            elif isinstance(event, FieldDefinitionUpdated):
                scope = "system" if event.tenant_id == SYSTEM_TENANT_ID else "tenant"
                cur.execute(
                    f"UPDATE {definitions} SET searchable = ?, display_order = ?, body = ?,"
                    " keep_for = ?, retention_action = ?"
                    " WHERE tenant_id = ? AND entity_name = ? AND field_key = ?"
                    " AND generation = ?",
                    (
                        int(event.searchable),
                        event.display_order,
                        _body(event, scope),
                        *_retention(event),
                        event.tenant_id,
                        event.entity_name,
                        event.field_key,
                        event.generation,
                    ),
                )
            elif isinstance(event, FieldDefinitionDeleted):
                cur.execute(
                    f"UPDATE {definitions} SET active = 0"
                    " WHERE tenant_id = ? AND entity_name = ? AND field_key = ?",
                    (event.tenant_id, event.entity_name, event.field_key),
                )
                self._cascade(cur, sql, event)
        writes.flush()

    def _cascade(self, cur: SqlCursor, sql: _Sql, event: FieldDefinitionDeleted) -> None:
        """One set-based statement: the key leaves every affected entity row at once."""
        key = event.field_key if sql.pg else _path(event.field_key)
        statement, params = sql.cascade, [key, event.entity_name, key]
        if event.scope == "tenant":
            statement += " AND tenant_id = ?"
            params.append(event.tenant_id)
        else:
            # A tenant's own active definition of the key shadows the system's for that
            # tenant; its values are not the system's to remove.
            values, definitions = self.tables["entity_values"], self.tables["definitions"]
            statement += (
                f" AND NOT EXISTS (SELECT 1 FROM {definitions} d"
                f" WHERE d.tenant_id = {values}.tenant_id AND d.entity_name = ?"
                " AND d.field_key = ? AND d.active = 1)"
            )
            params += [event.entity_name, event.field_key]
        cur.execute(statement, params)
        # The clock rows of the definition's values go with them (its every generation).
        owner = event.tenant_id
        cur.execute(
            sql.clock.forget_definition,
            (str(definition_id(owner, event.entity_name, event.field_key)),),
        )
