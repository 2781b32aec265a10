"""The webhook tables' names and rows, and the rule both writers of an order's head
keep (the use cases' redeliver and the delivery loop's finish): see ``store``."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from application.webhooks.ports import DeliveryRecord, WebhookRecord
from domain.webhook import PENDING

WEBHOOKS = "webhooks"
DELIVERIES = "webhook_deliveries"

WEBHOOK_COLUMNS = (
    "webhook_id, tenant_id, url, events, description, secret, created_at, enabled, cursor"
)
DELIVERY_COLUMNS = (
    "delivery_id, webhook_id, tenant_id, sequence, item_id, item_type, order_key, state,"
    " attempts, created_at, next_at, last_status, last_error, delivered_at"
)

CHUNK = 100  # rows per multi-row statement (SQLite allows 500 compound terms)


def webhook_of(row: Sequence[Any]) -> WebhookRecord:
    return WebhookRecord(
        webhook_id=row[0],
        tenant_id=row[1],
        url=row[2],
        events=json.loads(row[3]),
        description=row[4],
        sealed_secret=row[5],
        created_at=row[6],
        enabled=bool(row[7]),
        cursor=int(row[8]),
    )


def delivery_of(row: Sequence[Any]) -> DeliveryRecord:
    return DeliveryRecord(
        delivery_id=row[0],
        webhook_id=row[1],
        tenant_id=row[2],
        sequence=int(row[3]),
        item_id=row[4],
        item_type=row[5],
        order_key=row[6],
        state=row[7],
        attempts=int(row[8]),
        created_at=float(row[9]),
        next_at=float(row[10]),
        last_status=None if row[11] is None else int(row[11]),
        last_error=row[12],
        delivered_at=None if row[13] is None else float(row[13]),
    )


def lock_webhooks(dialect: str, cur: Any, webhook_ids: Collection[str]) -> None:
    """On PostgreSQL, lock these webhooks' rows (in one order, so two lockers never
    deadlock): head changes of one webhook then never interleave."""
    if dialect != "postgresql" or not webhook_ids:
        return
    ordered = sorted(set(webhook_ids))
    cur.execute(
        f"SELECT webhook_id FROM {WEBHOOKS} WHERE webhook_id IN"
        f" ({', '.join('?' for _ in ordered)}) ORDER BY webhook_id FOR UPDATE",
        tuple(ordered),
    )
    cur.fetchall()


def promote_heads(cur: Any, orders: Collection[tuple[str, str]]) -> None:
    """Mark the first pending delivery of each (webhook, order key) as its head, in
    one statement per hundred orders."""
    ordered = sorted(set(orders))
    for start in range(0, len(ordered), CHUNK):
        chunk = ordered[start : start + CHUNK]
        keys = " UNION ALL ".join(
            "SELECT CAST(? AS TEXT) AS w, CAST(? AS TEXT) AS k" for _ in chunk
        )
        cur.execute(
            f"UPDATE {DELIVERIES} SET head = 1 WHERE delivery_id IN (SELECT (SELECT"
            f" e.delivery_id FROM {DELIVERIES} e WHERE e.webhook_id = o.w"
            " AND e.order_key = o.k AND e.state = ? ORDER BY e.sequence LIMIT 1)"
            f" FROM ({keys}) o)",
            (PENDING, *(value for key in chunk for value in key)),
        )
