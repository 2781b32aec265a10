"""The retention sweeper's read side of custom-field values (``ExpiringValues``): the
live definitions with a retention, and the values due under one of them, found with one
statement per batch over ``value_clock``: the definition's live generation walked in
the order of the clock's primary key from the cursor (a range scan, the set time checked
on the way), so a batch costs the same however many values come after it. Each value
comes with its entity row's stream version (a primary-key lookup for each row found),
so the sweeper can append its expiry without loading the stream."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from application.custom_fields.ports import DueValue, Position, RetainedDefinition
from application.ports import SqlDatabase
from domain.retention import Retention
from projections.custom_fields import TABLES

_ORDER = "c.tenant_id, c.entity_name, c.entity_id, c.field_key"


class ValueExpiryReader:
    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.definitions = tables["definitions"]
        self.clock = tables["value_clock"]
        self.values = tables["entity_values"]

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
        self, definition: RetainedDefinition, cutoff: int, after: Position | None, limit: int
    ) -> list[DueValue]:
        sql = (
            "SELECT c.tenant_id, c.entity_name, c.entity_id, c.field_key, c.set_at,"
            # A subquery per row found, not a join: PostgreSQL would merge-join along the
            # values' whole key up to the cursor, a batch costing more the further it is.
            f" (SELECT v.version FROM {self.values} v WHERE v.tenant_id = c.tenant_id"
            " AND v.entity_name = c.entity_name AND v.entity_id = c.entity_id)"
            f" FROM {self.clock} c WHERE c.definition_id = ? AND c.generation = ?"
            " AND c.set_at <= ?"
            f" AND EXISTS (SELECT 1 FROM {self.definitions} d WHERE d.definition_id = ?"
            " AND d.generation = ? AND d.active = 1)"
        )
        live = (definition.definition_id, definition.generation)
        params: list[Any] = [*live, cutoff, *live]
        if after is not None:
            sql += f" AND ({_ORDER}) > (?, ?, ?, ?)"
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
                definition_id=definition.definition_id,
                generation=definition.generation,
                set_at=int(s),
                version=None if v is None else int(v),
            )
            for t, e, i, k, s, v in rows
        ]
