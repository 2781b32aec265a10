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
order is pending. The head of each order carries ``head = 1`` so that a claim reads the
(few) heads through an index instead of the whole backlog; fan-out, finish and
redeliver keep the flag, each under the webhook row's lock on PostgreSQL (the one
fan-out takes), so a new delivery and the finish of its order's last one never both
miss it. The claim still checks that no earlier delivery of the order is pending.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
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

CHUNK = 100  # rows per multi-row statement (SQLite allows 500 compound terms)

_OUTCOME_ROW = (
    "SELECT CAST(? AS TEXT) AS id, CAST(? AS INTEGER) AS attempt, CAST(? AS TEXT) AS state,"
    " CAST(? AS DOUBLE PRECISION) AS next_at, CAST(? AS INTEGER) AS status,"
    " CAST(? AS TEXT) AS error, CAST(? AS DOUBLE PRECISION) AS delivered_at,"
    " CAST(? AS INTEGER) AS keep_head"
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
    first_at: float  # when its first attempt was claimed (the retry budget's start)


@dataclass(frozen=True)
class Lane:
    """One lane's share of a claim: up to ``limit`` heads, never of a webhook in
    ``exclude`` and, when ``only`` is given, only of those webhooks. With ``turns``
    (webhook id -> when it last had an attempt), the lane takes turns: every due head
    of ``only`` is a candidate and the webhooks waiting longest go first, so a backlog
    fanned out early cannot keep a later webhook waiting until it is drained."""

    limit: int
    exclude: Collection[str] = ()
    only: Collection[str] | None = None
    turns: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Finished:
    """An attempt's outcome to record."""

    claimed: Claimed
    state: str
    next_at: float
    status: int | None
    error: str | None
    at: float


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


def _candidates(lane: Lane) -> int:
    if lane.turns is not None and lane.only is not None:
        return max(lane.limit * 2, len(lane.only) * 2)
    return lane.limit * 2


def _outcome_values(o: Finished) -> tuple[Any, ...]:
    return (
        o.claimed.delivery.delivery_id,
        o.claimed.attempt,
        o.state,
        o.next_at,
        o.status,
        o.error,
        o.at if o.state == DELIVERED else None,
        1 if o.state == PENDING else 0,  # a finished delivery is no order's head
    )


def _claimed(row: Sequence[Any], now: float) -> Claimed:
    """A claimed head as the claim left it: one attempt more, its lease written."""
    before = _delivery(row)
    record = replace(before, attempts=before.attempts + 1)
    first_at = now if row[14] is None else float(row[14])
    return Claimed(record, row[15], row[16], record.attempts, first_at)


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

    def _add_head_column(self, cur: Any) -> bool:
        """Whether the table lacked the ``head`` column (created before it was kept)."""
        if self.db.dialect == "postgresql":
            cur.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = ? AND column_name = 'head'",
                (DELIVERIES,),
            )
        else:
            cur.execute(f"SELECT 1 FROM pragma_table_info('{DELIVERIES}') WHERE name = 'head'")
        if cur.fetchone() is not None:
            return False
        cur.execute(f"ALTER TABLE {DELIVERIES} ADD COLUMN head INTEGER NOT NULL DEFAULT 0")
        return True

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
                f"SELECT webhook_id, order_key FROM {DELIVERIES}"
                " WHERE tenant_id = ? AND delivery_id = ?",
                (tenant_id, delivery_id),
            )
            found = cur.fetchone()
            if found is None:
                return None
            webhook_id, key = found
            self._lock_webhooks(cur, [webhook_id])
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
                self._promote(cur, [(webhook_id, key)])
            cur.execute(
                f"SELECT {_D_COLUMNS} FROM {DELIVERIES} WHERE tenant_id = ? AND delivery_id = ?",
                (tenant_id, delivery_id),
            )
            row = cur.fetchone()
        return None if row is None else _delivery(row)

    def _no_flush_wait(self, cur: Any) -> None:
        """On PostgreSQL, commit outcomes without waiting for the log's flush to disk
        (a flush costs milliseconds, the whole transaction a fraction of one). A crash
        of the database can lose only the last outcomes, never one without those before
        it; their deliveries are leased again after the lease and attempted once more
        (at least once, as after a timeout). Claims still wait for the flush: a claim
        flushes every outcome committed before it, and a lease is never lost while its
        attempt may still be running."""
        if self.db.dialect == "postgresql":
            cur.execute("SET LOCAL synchronous_commit = off")

    def _lock_webhooks(self, cur: Any, webhook_ids: Collection[str]) -> None:
        """On PostgreSQL, lock these webhooks' rows (in one order, so two lockers never
        deadlock): head changes of one webhook then never interleave."""
        if self.db.dialect != "postgresql" or not webhook_ids:
            return
        ordered = sorted(set(webhook_ids))
        cur.execute(
            f"SELECT webhook_id FROM {WEBHOOKS} WHERE webhook_id IN"
            f" ({', '.join('?' for _ in ordered)}) ORDER BY webhook_id FOR UPDATE",
            tuple(ordered),
        )
        cur.fetchall()

    def _promote(self, cur: Any, orders: Collection[tuple[str, str]]) -> None:
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
            busy: set[str] = set()  # order keys with a pending delivery (a head already)
            for key in {d.order_key for d in new}:
                cur.execute(
                    f"SELECT 1 FROM {DELIVERIES} WHERE webhook_id = ? AND order_key = ?"
                    " AND state = ? LIMIT 1",
                    (webhook_id, key, PENDING),
                )
                if cur.fetchone() is not None:
                    busy.add(key)
            rows = []
            for d in new:
                head = d.order_key not in busy
                busy.add(d.order_key)
                rows.append(
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
                        int(head),
                    )
                )
            cur.executemany(
                f"INSERT INTO {DELIVERIES} (delivery_id, webhook_id, tenant_id, sequence,"
                " item_id, item_type, order_key, state, attempts, created_at, next_at, head)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                rows,
            )
            return True

    def claim(
        self,
        holder: str,
        now: float,
        lease: float,
        lanes: Sequence[Lane],
        *,
        per_webhook: int = 1,
        in_flight: Mapping[str, int] | None = None,
    ) -> list[list[Claimed]]:
        """Lease due heads of their orders to ``holder`` for ``lease`` seconds, for each
        lane its share, all in one transaction; at most ``per_webhook`` attempts per
        webhook counting those already ``in_flight`` in this worker."""
        counts = dict(in_flight or {})
        open_lanes = [lane.limit > 0 and (lane.only is None or bool(lane.only)) for lane in lanes]
        if not any(open_lanes):
            return [[] for _ in lanes]
        picked: list[list[tuple[Any, ...]]] = []
        with self.db.transaction() as cur:
            for lane, is_open in zip(lanes, open_lanes, strict=True):
                rows = self._due_heads(cur, now, lane) if is_open else []
                if lane.turns is not None:
                    turns = lane.turns
                    rows = sorted(rows, key=lambda row: turns.get(row[1], 0.0))
                mine: list[tuple[Any, ...]] = []
                for row in rows:
                    webhook_id = row[1]
                    if len(mine) >= lane.limit or counts.get(webhook_id, 0) >= per_webhook:
                        continue
                    counts[webhook_id] = counts.get(webhook_id, 0) + 1
                    mine.append(tuple(row))
                picked.append(mine)
            chosen = [row[0] for rows in picked for row in rows]
            for start in range(0, len(chosen), CHUNK):
                chunk = chosen[start : start + CHUNK]
                cur.execute(
                    f"UPDATE {DELIVERIES} SET attempts = attempts + 1, lease_holder = ?,"
                    " lease_until = ?, first_at = COALESCE(first_at, ?)"
                    f" WHERE delivery_id IN ({', '.join('?' for _ in chunk)})",
                    (holder, now + lease, now, *chunk),
                )
        return [[_claimed(row, now) for row in rows] for rows in picked]

    def _due_heads(self, cur: Any, now: float, lane: Lane) -> list[Any]:
        lock = " FOR UPDATE OF d SKIP LOCKED" if self.db.dialect == "postgresql" else ""
        where, params = "", list[str]()
        if lane.exclude:
            where += f" AND d.webhook_id NOT IN ({', '.join('?' for _ in lane.exclude)})"
            params.extend(lane.exclude)
        if lane.only is not None:
            where += f" AND d.webhook_id IN ({', '.join('?' for _ in lane.only)})"
            params.extend(lane.only)
        columns = ", ".join(f"d.{c.strip()}" for c in _D_COLUMNS.split(","))
        cur.execute(
            f"SELECT {columns}, d.first_at, w.url, w.secret"
            f" FROM {DELIVERIES} d JOIN {WEBHOOKS} w ON w.webhook_id = d.webhook_id"
            " WHERE d.state = ? AND d.head = 1 AND d.next_at <= ? AND w.enabled = 1"
            f" AND (d.lease_until IS NULL OR d.lease_until < ?){where}"
            f" AND NOT EXISTS (SELECT 1 FROM {DELIVERIES} e WHERE e.webhook_id = d.webhook_id"
            " AND e.order_key = d.order_key AND e.state = ? AND e.sequence < d.sequence)"
            f" ORDER BY d.next_at LIMIT ?{lock}",
            (PENDING, now, now, *params, PENDING, _candidates(lane)),
        )
        return list(cur.fetchall())

    def any_due(self, now: float) -> bool:
        """Whether some head is due and not leased (a read: no writer lock when idle)."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT 1 FROM {DELIVERIES} WHERE state = ? AND head = 1 AND next_at <= ?"
                " AND (lease_until IS NULL OR lease_until < ?) LIMIT 1",
                (PENDING, now, now),
            )
            return cur.fetchone() is not None

    def finish(self, holder: str, outcomes: Sequence[Finished]) -> list[bool]:
        """Record attempts' outcomes in one transaction; for each, False when its lease
        was lost meanwhile (nothing written for it)."""
        if not outcomes:
            return []
        kept: set[str] = set()
        with self.db.transaction() as cur:
            self._no_flush_wait(cur)
            self._lock_webhooks(cur, [o.claimed.delivery.webhook_id for o in outcomes])
            for start in range(0, len(outcomes), CHUNK):
                chunk = outcomes[start : start + CHUNK]
                rows = " UNION ALL ".join(_OUTCOME_ROW for _ in chunk)
                cur.execute(
                    f"UPDATE {DELIVERIES} SET state = v.state, next_at = v.next_at,"
                    " last_status = v.status, last_error = v.error,"
                    " delivered_at = v.delivered_at, lease_holder = NULL, lease_until = NULL,"
                    f" head = {DELIVERIES}.head * v.keep_head FROM ({rows}) v"
                    f" WHERE {DELIVERIES}.delivery_id = v.id AND {DELIVERIES}.lease_holder = ?"
                    f" AND {DELIVERIES}.attempts = v.attempt AND {DELIVERIES}.state = ?"
                    f" RETURNING {DELIVERIES}.delivery_id",
                    (*(value for o in chunk for value in _outcome_values(o)), holder, PENDING),
                )
                kept.update(str(row[0]) for row in cur.fetchall())
            self._promote(
                cur,
                [
                    (o.claimed.delivery.webhook_id, o.claimed.delivery.order_key)
                    for o in outcomes
                    if o.state != PENDING and o.claimed.delivery.delivery_id in kept
                ],
            )
        return [o.claimed.delivery.delivery_id in kept for o in outcomes]

    def backlog(self) -> dict[str, int]:
        """Pending deliveries per webhook."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT webhook_id, COUNT(*) FROM {DELIVERIES} WHERE state = ?"
                " GROUP BY webhook_id",
                (PENDING,),
            )
            return {row[0]: int(row[1]) for row in cur.fetchall()}
