"""The retention sweeper's read side of custom-field values (``ExpiringValues``): the
live definitions with a retention, and the values due under one of them, found with one
statement per batch over ``value_clock`` joined to the live definitions. The clock's
index leads with (definition, set time) and holds the rest of the walk's order, so a
batch is a range scan from the cursor, whatever the number of values due after it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from application.custom_fields.ports import DueValue, Position, RetainedDefinition
from application.ports import SqlDatabase
from domain.retention import Retention
from projections.custom_fields import TABLES

_ORDER = "c.set_at, c.tenant_id, c.entity_name, c.entity_id, c.field_key, c.generation"


class ValueExpiryReader:
    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.definitions = tables["definitions"]
        self.clock = tables["value_clock"]

    def retained_definitions(self) -> list[RetainedDefinition]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT definition_id, generation, body, keep_for, retention_action"
                f" FROM {self.definitions} WHERE active = 1 AND keep_for IS NOT NULL"
            )
            rows = cur.fetchall()
        found = []
        for definition_id, generation, body, keep_for, action in rows:
            field = dict(json.loads(body)["field"])
            field.pop("fieldAccess", None)
            found.append(
                RetainedDefinition(
                    definition_id=str(definition_id),
                    generation=int(generation),
                    field=field,
                    retention=Retention(keep_for=keep_for, action=action),
                )
            )
        return found

    def due(
        self, definition_id: str, cutoff: int, after: Position | None, limit: int
    ) -> list[DueValue]:
        sql = (
            "SELECT c.tenant_id, c.entity_name, c.entity_id, c.field_key, c.generation,"
            f" c.set_at FROM {self.clock} c JOIN {self.definitions} d"
            " ON d.definition_id = c.definition_id AND d.generation = c.generation"
            " AND d.active = 1 WHERE c.definition_id = ? AND c.set_at <= ?"
        )
        params: list[Any] = [definition_id, cutoff]
        if after is not None:
            sql += f" AND ({_ORDER}) > (?, ?, ?, ?, ?, ?)"
            params += list(after)
        sql += f" ORDER BY {_ORDER} LIMIT ?"
        params.append(limit)
        with self.db.reading() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        return [
            DueValue(
                tenant_id=str(t),
                entity_name=str(e),
                entity_id=str(i),
                field_key=str(k),
                definition_id=definition_id,
                generation=int(g),
                set_at=int(s),
            )
            for t, e, i, k, g, s in rows
        ]
