"""The custom-fields read model's query side (``CustomFieldsReader``): definitions, an
entity's values, and entities filtered by values (sealed cells match by digest); the
tables are written by ``projections.custom_fields``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from application.custom_fields.ports import Match
from application.ports import SqlDatabase
from application.users import SYSTEM_TENANT_ID
from projections.custom_fields import TABLES, compact_json
from projections.value_runs import path as _path


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
                params += [key, *match.digests, key, compact_json(match.value)]
            else:
                sql += (
                    f" AND (json_extract(fields, ?) IN ({marks})"
                    " OR json_extract(fields, ?) = json_extract(?, '$'))"
                )
                params += [f"{_path(key)}.d", *match.digests, _path(key), compact_json(match.value)]
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
