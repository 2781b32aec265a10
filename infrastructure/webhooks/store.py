"""Webhooks and their deliveries in the read-model database.

- ``webhooks``: one row per webhook: tenant, URL, filters, sealed secret, enabled,
  ``cursor`` — the last feed sequence of its tenant already turned into deliveries
  (the webhook's own tracking position over the feed) — and ``destination``, the URL's
  scheme, host and port, kept with the URL for the claims (attempts are counted by it).
  A tenant has at most the limit ``add`` is given: on PostgreSQL, adds of one tenant
  take a transaction-level advisory lock on it, so two never both count below it.
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
order is pending. The head of each order carries ``head = 1`` so that a claim reads the
(few) heads through an index instead of the whole backlog; fan-out, finish and
redeliver keep the flag, each under the webhook row's lock on PostgreSQL (the one
fan-out takes), so a new delivery and the finish of its order's last one never both
miss it. The claim still checks that no earlier delivery of the order is pending.
"""

from __future__ import annotations

import json
from typing import Any

from application.ports import SqlDatabase
from application.webhooks.ports import DeliveryRecord, WebhookRecord
from domain.webhook import DEAD, DELIVERED, PENDING, BadWebhookUrl, parse_url
from infrastructure.webhooks.tables import (
    DELIVERIES,
    DELIVERY_COLUMNS,
    WEBHOOK_COLUMNS,
    WEBHOOKS,
    delivery_of,
    lock_webhooks,
    promote_heads,
    webhook_of,
)


class SqlWebhookStore:
    """Implements ``WebhookStore``, and creates the tables (``SqlDeliveryQueue`` is the
    delivery loop's side of them)."""

    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {WEBHOOKS} (webhook_id TEXT PRIMARY KEY,"
                " tenant_id TEXT NOT NULL, url TEXT NOT NULL, events TEXT NOT NULL,"
                " description TEXT NOT NULL, secret TEXT NOT NULL, created_at TEXT NOT NULL,"
                " enabled INTEGER NOT NULL, cursor BIGINT NOT NULL,"
                " destination TEXT NOT NULL DEFAULT '')"
            )
            self._add_destination_column(cur)
            cur.execute(f"CREATE INDEX IF NOT EXISTS {WEBHOOKS}_tenant ON {WEBHOOKS} (tenant_id)")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {DELIVERIES} (delivery_id TEXT PRIMARY KEY,"
                " webhook_id TEXT NOT NULL, tenant_id TEXT NOT NULL, sequence BIGINT NOT NULL,"
                " item_id TEXT NOT NULL, item_type TEXT NOT NULL, order_key TEXT NOT NULL,"
                " state TEXT NOT NULL, attempts INTEGER NOT NULL, created_at DOUBLE PRECISION"
                " NOT NULL, next_at DOUBLE PRECISION NOT NULL, first_at DOUBLE PRECISION,"
                " last_status INTEGER, last_error TEXT, delivered_at DOUBLE PRECISION,"
                " lease_holder TEXT, lease_until DOUBLE PRECISION, head INTEGER NOT NULL DEFAULT 0,"
                " UNIQUE (webhook_id, sequence))"
            )
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_due ON {DELIVERIES} (state, next_at)"
            )
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_order ON {DELIVERIES}"
                " (webhook_id, order_key, state, sequence)"
            )
            if self._add_head_column(cur):
                cur.execute(
                    f"UPDATE {DELIVERIES} SET head = 1 WHERE state = ? AND NOT EXISTS"
                    f" (SELECT 1 FROM {DELIVERIES} e WHERE e.webhook_id = {DELIVERIES}.webhook_id"
                    f" AND e.order_key = {DELIVERIES}.order_key AND e.state = ?"
                    f" AND e.sequence < {DELIVERIES}.sequence)",
                    (PENDING, PENDING),
                )
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_heads ON {DELIVERIES}"
                " (state, head, next_at)"
            )

    def _add_destination_column(self, cur: Any) -> None:
        """Add and fill ``destination`` where the table was created before it was kept."""
        if self._has_column(cur, WEBHOOKS, "destination"):
            return
        cur.execute(f"ALTER TABLE {WEBHOOKS} ADD COLUMN destination TEXT NOT NULL DEFAULT ''")
        cur.execute(f"SELECT webhook_id, url FROM {WEBHOOKS}")
        for webhook_id, url in cur.fetchall():
            cur.execute(
                f"UPDATE {WEBHOOKS} SET destination = ? WHERE webhook_id = ?",
                (destination_of(url), webhook_id),
            )

    def _has_column(self, cur: Any, table: str, column: str) -> bool:
        if self.db.dialect == "postgresql":
            cur.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = ? AND column_name = ?",
                (table, column),
            )
        else:
            cur.execute(f"SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?", (column,))
        return cur.fetchone() is not None

    def _add_head_column(self, cur: Any) -> bool:
        """Whether the table lacked the ``head`` column (created before it was kept)."""
        if self._has_column(cur, DELIVERIES, "head"):
            return False
        cur.execute(f"ALTER TABLE {DELIVERIES} ADD COLUMN head INTEGER NOT NULL DEFAULT 0")
        return True

    # --- the use cases' port ---------------------------------------------------------

    def add(self, record: WebhookRecord, limit: int) -> int:
        with self.db.transaction() as cur:
            if self.db.dialect == "postgresql":  # SQLite's writer lock serialises adds
                cur.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(?))", ("webhooks:" + record.tenant_id,)
                )
            cur.execute(f"SELECT COUNT(*) FROM {WEBHOOKS} WHERE tenant_id = ?", (record.tenant_id,))
            count = int(cur.fetchone()[0])
            if count >= limit:
                return count
            cur.execute(
                f"INSERT INTO {WEBHOOKS} ({WEBHOOK_COLUMNS}, destination)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    destination_of(record.url),
                ),
            )
            return count

    def get(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {WEBHOOK_COLUMNS} FROM {WEBHOOKS} WHERE tenant_id = ? AND webhook_id = ?",
                (tenant_id, webhook_id),
            )
            row = cur.fetchone()
        return None if row is None else webhook_of(row)

    def all_of(self, tenant_id: str) -> list[WebhookRecord]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {WEBHOOK_COLUMNS} FROM {WEBHOOKS} WHERE tenant_id = ?"
                " ORDER BY created_at, webhook_id",
                (tenant_id,),
            )
            return [webhook_of(row) for row in cur.fetchall()]

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
            ("destination", None if url is None else destination_of(url)),
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
                f"SELECT {DELIVERY_COLUMNS} FROM {DELIVERIES} WHERE {where}"
                " ORDER BY sequence LIMIT ?",
                (*params, limit),
            )
            return [delivery_of(row) for row in cur.fetchall()]

    def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> DeliveryRecord | None:
        with self.db.transaction() as cur:
            cur.execute(
                f"SELECT webhook_id, order_key FROM {DELIVERIES}"
                " WHERE tenant_id = ? AND delivery_id = ?",
                (tenant_id, delivery_id),
            )
            found = cur.fetchone()
            if found is None:
                return None
            webhook_id, key = found
            lock_webhooks(self.db.dialect, cur, [webhook_id])
            cur.execute(
                f"UPDATE {DELIVERIES} SET state = ?, attempts = 0, next_at = ?, first_at = NULL,"
                " lease_holder = NULL, lease_until = NULL"
                " WHERE tenant_id = ? AND delivery_id = ? AND state IN (?, ?)",
                (PENDING, now, tenant_id, delivery_id, DELIVERED, DEAD),
            )
            if cur.rowcount:  # it may now come before its order's head
                cur.execute(
                    f"UPDATE {DELIVERIES} SET head = 0 WHERE webhook_id = ? AND order_key = ?"
                    " AND state = ? AND head = 1",
                    (webhook_id, key, PENDING),
                )
                promote_heads(cur, [(webhook_id, key)])
            cur.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM {DELIVERIES}"
                " WHERE tenant_id = ? AND delivery_id = ?",
                (tenant_id, delivery_id),
            )
            row = cur.fetchone()
        return None if row is None else delivery_of(row)


def destination_of(url: str) -> str:
    """The URL's scheme, host and port (the URL itself if it no longer parses: it was
    checked when stored, and an attempt at it fails as a bad URL)."""
    try:
        return parse_url(url).destination
    except BadWebhookUrl:
        return url
