"""Webhooks and their deliveries in the read-model database.

- ``webhooks``: one row per webhook: tenant, URL, filters, sealed secret, enabled, and
  ``cursor`` — the last feed sequence of its tenant already turned into deliveries
  (the webhook's own tracking position over the feed).
- ``deliveries``: one row per (webhook, feed sequence): state (pending / delivered /
  dead), attempts, the time of the next attempt, and a *lease* (``lease_holder``,
  ``lease_until``) naming the one worker attempting it now.

Claiming is the fleet-wide rule "one attempt at a time per delivery": a worker takes
due rows in one transaction that also writes its lease — PostgreSQL rows are picked
with ``FOR UPDATE SKIP LOCKED`` so concurrent claimers never wait on or take the same
row; SQLite's writer lock (``BEGIN IMMEDIATE``) serialises claimers. A finished attempt
is recorded only by the holder of the lease for that attempt number, so a worker whose
lease lapsed cannot overwrite a later attempt's outcome. Only the head of each order
(webhook, order key) is ever claimable: a delivery waits while an earlier one of its
order is pending.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from application.ports import SqlDatabase
from application.webhooks.ports import DeliveryRecord, WebhookRecord
from domain.webhook import DEAD, DELIVERED, PENDING

WEBHOOKS = "webhooks"
DELIVERIES = "webhook_deliveries"

_W_COLUMNS = "webhook_id, tenant_id, url, events, description, secret, created_at, enabled, cursor"
_D_COLUMNS = (
    "delivery_id, webhook_id, tenant_id, sequence, item_id, item_type, order_key, state,"
    " attempts, created_at, next_at, last_status, last_error, delivered_at"
)


@dataclass(frozen=True)
class NewDelivery:
    sequence: int
    item_id: str
    item_type: str
    order_key: str


@dataclass(frozen=True)
class Claimed:
    delivery: DeliveryRecord
    url: str
    sealed_secret: str
    attempt: int  # this attempt's number (1 for the first)


def _webhook(row: Sequence[Any]) -> WebhookRecord:
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


def _delivery(row: Sequence[Any]) -> DeliveryRecord:
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


class SqlWebhookStore:
    """Implements ``WebhookStore`` and the delivery loop's claim/finish operations."""

    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {WEBHOOKS} (webhook_id TEXT PRIMARY KEY,"
                " tenant_id TEXT NOT NULL, url TEXT NOT NULL, events TEXT NOT NULL,"
                " description TEXT NOT NULL, secret TEXT NOT NULL, created_at TEXT NOT NULL,"
                " enabled INTEGER NOT NULL, cursor BIGINT NOT NULL)"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {DELIVERIES} (delivery_id TEXT PRIMARY KEY,"
                " webhook_id TEXT NOT NULL, tenant_id TEXT NOT NULL, sequence BIGINT NOT NULL,"
                " item_id TEXT NOT NULL, item_type TEXT NOT NULL, order_key TEXT NOT NULL,"
                " state TEXT NOT NULL, attempts INTEGER NOT NULL, created_at DOUBLE PRECISION"
                " NOT NULL, next_at DOUBLE PRECISION NOT NULL, first_at DOUBLE PRECISION,"
                " last_status INTEGER, last_error TEXT, delivered_at DOUBLE PRECISION,"
                " lease_holder TEXT, lease_until DOUBLE PRECISION,"
                " UNIQUE (webhook_id, sequence))"
            )
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_due ON {DELIVERIES} (state, next_at)"
            )
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_order ON {DELIVERIES}"
                " (webhook_id, order_key, state, sequence)"
            )

    # --- the use cases' port ---------------------------------------------------------

    def add(self, record: WebhookRecord) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {WEBHOOKS} ({_W_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.webhook_id,
                    record.tenant_id,
                    record.url,
                    json.dumps(record.events),
                    record.description,
                    record.sealed_secret,
                    record.created_at,
                    1 if record.enabled else 0,
                    record.cursor,
                ),
            )

    def get(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_W_COLUMNS} FROM {WEBHOOKS} WHERE tenant_id = ? AND webhook_id = ?",
                (tenant_id, webhook_id),
            )
            row = cur.fetchone()
        return None if row is None else _webhook(row)

    def all_of(self, tenant_id: str) -> list[WebhookRecord]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_W_COLUMNS} FROM {WEBHOOKS} WHERE tenant_id = ?"
                " ORDER BY created_at, webhook_id",
                (tenant_id,),
            )
            return [_webhook(row) for row in cur.fetchall()]

    def update(
        self,
        tenant_id: str,
        webhook_id: str,
        *,
        url: str | None,
        events: list[str] | None,
        description: str | None,
        enabled: bool | None,
    ) -> bool:
        sets: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("url", url),
            ("events", None if events is None else json.dumps(events)),
            ("description", description),
            ("enabled", None if enabled is None else int(enabled)),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        with self.db.transaction() as cur:
            if not sets:
                cur.execute(
                    f"SELECT 1 FROM {WEBHOOKS} WHERE tenant_id = ? AND webhook_id = ?",
                    (tenant_id, webhook_id),
                )
                return cur.fetchone() is not None
            cur.execute(
                f"UPDATE {WEBHOOKS} SET {', '.join(sets)} WHERE tenant_id = ? AND webhook_id = ?",
                (*params, tenant_id, webhook_id),
            )
            return bool(cur.rowcount)

    def set_secret(self, tenant_id: str, webhook_id: str, sealed_secret: str) -> bool:
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {WEBHOOKS} SET secret = ? WHERE tenant_id = ? AND webhook_id = ?",
                (sealed_secret, tenant_id, webhook_id),
            )
            return bool(cur.rowcount)

    def delete(self, tenant_id: str, webhook_id: str) -> bool:
        with self.db.transaction() as cur:
            cur.execute(
                f"DELETE FROM {WEBHOOKS} WHERE tenant_id = ? AND webhook_id = ?",
                (tenant_id, webhook_id),
            )
            gone = bool(cur.rowcount)
            if gone:
                cur.execute(f"DELETE FROM {DELIVERIES} WHERE webhook_id = ?", (webhook_id,))
            return gone

    def deliveries(
        self, tenant_id: str, webhook_id: str, state: str | None, after: int, limit: int
    ) -> list[DeliveryRecord]:
        where, params = (
            "tenant_id = ? AND webhook_id = ? AND sequence > ?",
            [
                tenant_id,
                webhook_id,
                after,
            ],
        )
        if state is not None:
            where += " AND state = ?"
            params.append(state)
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_D_COLUMNS} FROM {DELIVERIES} WHERE {where} ORDER BY sequence LIMIT ?",
                (*params, limit),
            )
            return [_delivery(row) for row in cur.fetchall()]

    def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> DeliveryRecord | None:
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {DELIVERIES} SET state = ?, attempts = 0, next_at = ?, first_at = NULL,"
                " lease_holder = NULL, lease_until = NULL"
                " WHERE tenant_id = ? AND delivery_id = ? AND state IN (?, ?)",
                (PENDING, now, tenant_id, delivery_id, DELIVERED, DEAD),
            )
            cur.execute(
                f"SELECT {_D_COLUMNS} FROM {DELIVERIES} WHERE tenant_id = ? AND delivery_id = ?",
                (tenant_id, delivery_id),
            )
            row = cur.fetchone()
        return None if row is None else _delivery(row)

    # --- the delivery loop -----------------------------------------------------------

    def enabled_webhooks(self) -> list[WebhookRecord]:
        with self.db.reading() as cur:
            cur.execute(f"SELECT {_W_COLUMNS} FROM {WEBHOOKS} WHERE enabled = 1")
            return [_webhook(row) for row in cur.fetchall()]

    def fan_out(
        self, webhook_id: str, seen: int, cursor: int, new: Sequence[NewDelivery], now: float
    ) -> bool:
        """Add ``new`` and move the webhook's cursor from ``seen`` to ``cursor`` in one
        transaction; False (nothing written) when another worker moved it first."""
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {WEBHOOKS} SET cursor = ? WHERE webhook_id = ? AND cursor = ?",
                (cursor, webhook_id, seen),
            )
            if not cur.rowcount:
                return False
            cur.execute(f"SELECT tenant_id FROM {WEBHOOKS} WHERE webhook_id = ?", (webhook_id,))
            tenant_id = cur.fetchone()[0]
            cur.executemany(
                f"INSERT INTO {DELIVERIES} (delivery_id, webhook_id, tenant_id, sequence,"
                " item_id, item_type, order_key, state, attempts, created_at, next_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
                [
                    (
                        str(uuid4()),
                        webhook_id,
                        tenant_id,
                        d.sequence,
                        d.item_id,
                        d.item_type,
                        d.order_key,
                        PENDING,
                        now,
                        now,
                    )
                    for d in new
                ],
            )
            return True

    def claim(
        self,
        holder: str,
        now: float,
        lease: float,
        limit: int,
        *,
        exclude: Collection[str] = (),
        only: Collection[str] | None = None,
    ) -> list[Claimed]:
        """Lease up to ``limit`` due heads of their orders to ``holder`` for ``lease``
        seconds, at most one per webhook, never of a webhook in ``exclude`` and, when
        ``only`` is given, only of those webhooks."""
        if limit <= 0 or (only is not None and not only):
            return []
        lock = " FOR UPDATE OF d SKIP LOCKED" if self.db.dialect == "postgresql" else ""
        where, params = "", list[str]()
        if exclude:
            where += f" AND d.webhook_id NOT IN ({', '.join('?' for _ in exclude)})"
            params.extend(exclude)
        if only is not None:
            where += f" AND d.webhook_id IN ({', '.join('?' for _ in only)})"
            params.extend(only)
        with self.db.transaction() as cur:
            cur.execute(
                f"SELECT d.delivery_id, d.attempts, w.url, w.secret, d.webhook_id"
                f" FROM {DELIVERIES} d JOIN {WEBHOOKS} w ON w.webhook_id = d.webhook_id"
                " WHERE d.state = ? AND d.next_at <= ? AND w.enabled = 1"
                f" AND (d.lease_until IS NULL OR d.lease_until < ?){where}"
                f" AND NOT EXISTS (SELECT 1 FROM {DELIVERIES} e WHERE e.webhook_id = d.webhook_id"
                " AND e.order_key = d.order_key AND e.state = ? AND e.sequence < d.sequence)"
                f" ORDER BY d.next_at LIMIT ?{lock}",
                (PENDING, now, now, *params, PENDING, limit * 4),
            )
            rows = cur.fetchall()
            picked: list[tuple[Any, ...]] = []
            seen: set[str] = set()
            for row in rows:
                if row[4] in seen or len(picked) >= limit:
                    continue
                seen.add(row[4])
                picked.append(tuple(row))
            claimed: list[Claimed] = []
            for delivery_id, attempts, url, secret, _ in picked:
                cur.execute(
                    f"UPDATE {DELIVERIES} SET attempts = ?, lease_holder = ?, lease_until = ?,"
                    " first_at = COALESCE(first_at, ?) WHERE delivery_id = ?",
                    (int(attempts) + 1, holder, now + lease, now, delivery_id),
                )
                cur.execute(
                    f"SELECT {_D_COLUMNS} FROM {DELIVERIES} WHERE delivery_id = ?", (delivery_id,)
                )
                record = _delivery(cur.fetchone())
                claimed.append(Claimed(record, url, secret, record.attempts))
            return claimed

    def any_due(self, now: float) -> bool:
        """Whether some pending delivery is due (a read: no writer lock when idle)."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT 1 FROM {DELIVERIES} WHERE state = ? AND next_at <= ? LIMIT 1",
                (PENDING, now),
            )
            return cur.fetchone() is not None

    def first_attempt_at(self, delivery_id: str) -> float | None:
        with self.db.reading() as cur:
            cur.execute(f"SELECT first_at FROM {DELIVERIES} WHERE delivery_id = ?", (delivery_id,))
            row = cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def finish(
        self,
        claimed: Claimed,
        holder: str,
        *,
        state: str,
        next_at: float,
        status: int | None,
        error: str | None,
        now: float,
    ) -> bool:
        """Record an attempt's outcome; False when the lease was lost meanwhile."""
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {DELIVERIES} SET state = ?, next_at = ?, last_status = ?,"
                " last_error = ?, delivered_at = ?, lease_holder = NULL, lease_until = NULL"
                " WHERE delivery_id = ? AND lease_holder = ? AND attempts = ? AND state = ?",
                (
                    state,
                    next_at,
                    status,
                    error,
                    now if state == DELIVERED else None,
                    claimed.delivery.delivery_id,
                    holder,
                    claimed.attempt,
                    PENDING,
                ),
            )
            return bool(cur.rowcount)

    def backlog(self) -> dict[str, int]:
        """Pending deliveries per webhook."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT webhook_id, COUNT(*) FROM {DELIVERIES} WHERE state = ?"
                " GROUP BY webhook_id",
                (PENDING,),
            )
            return {row[0]: int(row[1]) for row in cur.fetchall()}
