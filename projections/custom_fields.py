"""The custom-fields read model: active definitions and each entity's values.

Tables (names via ``tables`` so a rebuild can build them under shadow names):

- ``definitions``: one row per (tenant or ``system``, entity, key) with its current
  generation and whether it is active; ``body`` is the definition as queries show it.
- ``entity_values``: one row per (tenant, entity name, entity id); ``fields`` is a JSON
  object key -> cell (jsonb on PostgreSQL). A cell is ``{"s": sealed value, "d": keyed
  digest}`` as the event carries them: the read model holds no plaintext, and equality
  filters compare digests (``application.custom_fields.sealing``).

A value event lands only if its definition is active at the value's generation — a
check inside the same statement as the write. A delete removes the key from every
affected row with one set-based UPDATE (jsonb ``-`` / ``json_remove``).

This module writes them; ``projections.custom_fields_reader`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from application.ports import Dialect, Recorded, SqlCursor
from application.users import SYSTEM_TENANT_ID
from domain.custom_field_values import CustomFieldValueCleared, CustomFieldValueSet
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
    definition_id,
)
from projections.base import index_name, shadow_tables
from projections.value_runs import ValueOp, ValueRunSql, write_run
from projections.value_runs import path as _path

TABLES = {"definitions": "cf_definitions", "entity_values": "cf_entity_values"}


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
        }
    )


class _Sql:
    """The few statements whose spelling differs between the two dialects."""

    def __init__(self, dialect: Dialect, definitions: str, values: str) -> None:
        pg = dialect == "postgresql"
        json_type = "JSONB" if pg else "TEXT"
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {definitions} ("
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, field_key TEXT NOT NULL,"
            " definition_id TEXT NOT NULL, generation INTEGER NOT NULL,"
            " active INTEGER NOT NULL, searchable INTEGER NOT NULL,"
            " display_order INTEGER NOT NULL, body TEXT NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, field_key))",
            f"CREATE INDEX {index_name(definitions, 'id')} ON {definitions} (definition_id)",
            f"CREATE TABLE IF NOT EXISTS {values} ("
            " tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            f" fields {json_type} NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id))",
        ]
        # Values are written in runs (``projections.value_runs``).
        self.run = ValueRunSql(dialect, definitions, values)
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

    def flush(self) -> None:
        if self.ops:
            write_run(self.cur, self.sql.run, self.ops)
            self.ops = []


VALUE_TOPICS = frozenset({CustomFieldValueSet.TOPIC, CustomFieldValueCleared.TOPIC})
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
            self._sql[dialect] = _Sql(
                dialect, self.tables["definitions"], self.tables["entity_values"]
            )
        return self._sql[dialect]

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        for statement in self.sql(dialect).create:
            cur.execute(statement)

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        sql = self.sql(dialect)
        definitions = self.tables["definitions"]
        writes = _ValueWrites(cur, sql)
        for recorded in batch:
            event = recorded.event
            if not isinstance(event, CustomFieldValueSet | CustomFieldValueCleared):
                writes.flush()  # a definition event comes after every earlier value
            if isinstance(event, CustomFieldValueSet):
                writes.ops.append(
                    (
                        event.tenant_id,
                        event.entity_name,
                        event.entity_id,
                        event.field_key,
                        _cell(event.sealed, event.digest),
                        event.definition_id,
                        event.generation,
                    )
                )
            elif isinstance(event, CustomFieldValueCleared):
                writes.ops.append(
                    (
                        event.tenant_id,
                        event.entity_name,
                        event.entity_id,
                        event.field_key,
                        None,
                        event.definition_id,
                        event.generation,
                    )
                )
            elif isinstance(event, FieldDefinitionDefined):
                cur.execute(
                    f"INSERT INTO {definitions} (tenant_id, entity_name, field_key,"
                    " definition_id, generation, active, searchable, display_order, body)"
                    " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)"
                    " ON CONFLICT (tenant_id, entity_name, field_key) DO UPDATE SET"
                    " generation = excluded.generation, active = 1,"
                    " searchable = excluded.searchable,"
                    " display_order = excluded.display_order, body = excluded.body",
                    (
                        event.tenant_id,
                        event.entity_name,
                        event.field_key,
                        str(definition_id(event.tenant_id, event.entity_name, event.field_key)),
                        event.generation,
                        int(event.searchable),
                        event.display_order,
                        _body(event, event.scope),
                    ),
                )
            elif isinstance(event, FieldDefinitionUpdated):
                scope = "system" if event.tenant_id == SYSTEM_TENANT_ID else "tenant"
                cur.execute(
                    f"UPDATE {definitions} SET searchable = ?, display_order = ?, body = ?"
                    " WHERE tenant_id = ? AND entity_name = ? AND field_key = ?"
                    " AND generation = ?",
                    (
                        int(event.searchable),
                        event.display_order,
                        _body(event, scope),
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
