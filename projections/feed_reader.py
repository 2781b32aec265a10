"""The change feed's query side (``FeedReader``): a tenant's items after a sequence, items
by key and tenants' heads (the tables are written by ``projections.feed``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

from application.ports import SqlDatabase
from projections.feed import TABLES


class FeedReader:
    """Implements ``FeedReadModel``: a tenant's items after a sequence, in order."""

    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.t = dict(tables)

    def items(self, tenant_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT sequence, item_id, type, occurred_at, account_id, data, sealed"
                f" FROM {self.t['items']} WHERE tenant_id = ? AND sequence > ?"
                " ORDER BY sequence LIMIT ?",
                (tenant_id, after, limit),
            )
            rows = cur.fetchall()
        return [_item((tenant_id, *row)) for row in rows]

    def head(self, tenant_id: str) -> int:
        with self.db.reading() as cur:
            cur.execute(f"SELECT sequence FROM {self.t['heads']} WHERE tenant_id = ?", (tenant_id,))
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    def items_at(self, keys: Collection[tuple[str, int]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        ordered = sorted(keys)
        for start in range(0, len(ordered), 250):
            chunk = ordered[start : start + 250]
            with self.db.reading() as cur:
                cur.execute(
                    "SELECT tenant_id, sequence, item_id, type, occurred_at, account_id, data,"
                    f" sealed FROM {self.t['items']} WHERE"
                    f" {' OR '.join('(tenant_id = ? AND sequence = ?)' for _ in chunk)}",
                    tuple(value for key in chunk for value in key),
                )
                found.extend(_item(row) for row in cur.fetchall())
        return found

    def heads(self, tenant_ids: Collection[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        ordered = sorted(tenant_ids)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            with self.db.reading() as cur:
                cur.execute(
                    f"SELECT tenant_id, sequence FROM {self.t['heads']}"
                    f" WHERE tenant_id IN ({', '.join('?' * len(chunk))})",
                    tuple(chunk),
                )
                found.update((str(tenant), int(seq)) for tenant, seq in cur.fetchall())
        return found


def _item(row: Sequence[Any]) -> dict[str, Any]:
    tenant_id, sequence, item_id, kind, occurred_at, account_id, data, sealed = row
    return {
        "sequence": int(sequence),
        "id": item_id,
        "type": kind,
        "tenantId": tenant_id,
        "occurredAt": occurred_at,
        "accountId": account_id,
        "data": orjson.loads(data),
        "sealed": orjson.loads(sealed),
    }
