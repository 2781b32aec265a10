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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from application.custom_fields.ports import Match
from application.ports import Dialect, Recorded, SqlCursor, SqlDatabase
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


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cell(sealed: str, digest: str) -> str:
    # The JSON text of {"s": sealed, "d": digest}, built from two string encodings: a
    # rebuild writes one per value event.
    return f'{{"s":{encode_basestring(sealed)},"d":{encode_basestring(digest)}}}'


def _body(event: FieldDefinitionDefined | FieldDefinitionUpdated, scope: str) -> str:
    field = dict(event.field)
    if event.field_access is not None:
        field["fieldAccess"] = event.field_access
    return _dumps(
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


class CustomFieldsReader:
    """Implements ``CustomFieldsReadModel`` over the serving tables."""

    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.definitions = tables["definitions"]
        self.values = tables["entity_values"]

    def list_definitions(self, tenant_id: str, entity_name: str | None) -> list[dict[str, Any]]:
        sql = f"SELECT body FROM {self.definitions} WHERE active = 1 AND tenant_id IN (?, ?)"
        params: list[Any] = [tenant_id, SYSTEM_TENANT_ID]
        if entity_name is not None:
            sql += " AND entity_name = ?"
            params.append(entity_name)
        sql += " ORDER BY entity_name, display_order, field_key, tenant_id"
        with self.db.reading() as cur:
            cur.execute(sql, params)
            return [json.loads(row[0]) for row in cur.fetchall()]

    @staticmethod
    def _fields(raw: Any) -> dict[str, Any]:
        return raw if isinstance(raw, dict) else json.loads(raw)

    def get_entity(self, tenant_id: str, entity_name: str, entity_id: str) -> dict[str, Any] | None:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT fields FROM {self.values}"
                " WHERE tenant_id = ? AND entity_name = ? AND entity_id = ?",
                (tenant_id, entity_name, entity_id),
            )
            row = cur.fetchone()
        if row is None:
            return None
        return {
            "entityName": entity_name,
            "entityId": entity_id,
            "customFields": self._fields(row[0]),
        }

    def list_entities(
        self,
        tenant_id: str,
        entity_name: str,
        where: Mapping[str, Match],
        limit: int,
        after: str | None,
    ) -> list[dict[str, Any]]:
        pg = self.db.dialect == "postgresql"
        sql = f"SELECT entity_id, fields FROM {self.values} WHERE tenant_id = ? AND entity_name = ?"
        params: list[Any] = [tenant_id, entity_name]
        for key, match in sorted(where.items()):
            # A sealed cell matches by digest; a cell from before sealing by its value.
            # SQLite: json_extract gives SQL values for scalars (1 = 1.0, true = 1) and
            # minified JSON text for objects and lists, the same on both sides.
            marks = ", ".join("?" * len(match.digests))
            if pg:
                sql += (
                    f" AND (fields -> ?::text ->> 'd' IN ({marks}) OR fields -> ?::text = ?::jsonb)"
                )
                params += [key, *match.digests, key, _dumps(match.value)]
            else:
                sql += (
                    f" AND (json_extract(fields, ?) IN ({marks})"
                    " OR json_extract(fields, ?) = json_extract(?, '$'))"
                )
                params += [f"{_path(key)}.d", *match.digests, _path(key), _dumps(match.value)]
        if after is not None:
            sql += " AND entity_id > ?"
            params.append(after)
        sql += " ORDER BY entity_id LIMIT ?"
        params.append(limit)
        with self.db.reading() as cur:
            cur.execute(sql, params)
            return [
                {"entityId": entity_id, "customFields": self._fields(fields)}
                for entity_id, fields in cur.fetchall()
            ]
