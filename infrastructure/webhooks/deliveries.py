"""The delivery loop's side of the webhook tables: fan-out of feed items into
deliveries, claims of due heads under a lease, outcomes recorded by the lease's holder
(the rules are described in ``store``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any
from uuid import uuid4

from application.ports import SqlDatabase
from application.webhooks.delivery_ports import (
    Admission,
    Claimed,
    Endpoint,
    Finished,
    Lane,
    NewDelivery,
)
from application.webhooks.ports import WebhookRecord
from domain.webhook import DELIVERED, PENDING
from infrastructure.webhooks.tables import (
    CHUNK,
    DELIVERIES,
    DELIVERY_COLUMNS,
    WEBHOOK_COLUMNS,
    WEBHOOKS,
    delivery_of,
    lock_webhooks,
    promote_heads,
    webhook_of,
)

_OUTCOME_ROW = (
    "SELECT CAST(? AS TEXT) AS id, CAST(? AS INTEGER) AS attempt, CAST(? AS TEXT) AS state,"
    " CAST(? AS DOUBLE PRECISION) AS next_at, CAST(? AS INTEGER) AS status,"
    " CAST(? AS TEXT) AS error, CAST(? AS DOUBLE PRECISION) AS delivered_at,"
    " CAST(? AS INTEGER) AS keep_head"
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
    before = delivery_of(row)
    record = replace(before, attempts=before.attempts + 1)
    first_at = now if row[14] is None else float(row[14])
    return Claimed(record, row[15], row[16], record.attempts, first_at, row[17])


def _endpoints(column: str, endpoints: Collection[Endpoint]) -> tuple[str, list[str]]:
    """``column IN`` the endpoints, as SQL over the webhook's tenant and destination,
    and its parameters."""
    pairs = ", ".join("(?, ?)" for _ in endpoints)
    return f"(w.tenant_id, w.destination) {column} (VALUES {pairs})", [
        value for endpoint in endpoints for value in endpoint
    ]


class SqlDeliveryQueue:
    """Implements ``DeliveryQueue``: the delivery loop's operations on the webhook tables."""

    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def enabled_webhooks(self) -> list[WebhookRecord]:
        with self.db.reading() as cur:
            cur.execute(f"SELECT {WEBHOOK_COLUMNS} FROM {WEBHOOKS} WHERE enabled = 1")
            return [webhook_of(row) for row in cur.fetchall()]

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
        admission: Admission | None = None,
    ) -> list[list[Claimed]]:
        """Lease due heads of their orders to ``holder`` for ``lease`` seconds, for each
        lane its share, all in one transaction; each head only when ``admission``
        admits it (the candidates in the lane's order: a head refused leaves its place
        to the next)."""
        open_lanes = [lane.limit > 0 and (lane.only is None or bool(lane.only)) for lane in lanes]
        if not any(open_lanes):
            return [[] for _ in lanes]
        picked: list[list[tuple[Any, ...]]] = []
        with self.db.transaction() as cur:
            for index, (lane, is_open) in enumerate(zip(lanes, open_lanes, strict=True)):
                rows = self._due_heads(cur, now, lane) if is_open else []
                if lane.turns is not None:
                    turns = lane.turns
                    rows = sorted(rows, key=lambda row: turns.get(Endpoint(row[2], row[17]), 0.0))
                mine: list[tuple[Any, ...]] = []
                for row in rows:
                    if len(mine) >= lane.limit:
                        break
                    if admission is None or admission.admit(index, Endpoint(row[2], row[17])):
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
            sql, values = _endpoints("NOT IN", lane.exclude)
            where, params = f"{where} AND {sql}", [*params, *values]
        if lane.only is not None:
            sql, values = _endpoints("IN", lane.only)
            where, params = f"{where} AND {sql}", [*params, *values]
        if lane.exclude_tenants:
            where += f" AND d.tenant_id NOT IN ({', '.join('?' for _ in lane.exclude_tenants)})"
            params.extend(lane.exclude_tenants)
        columns = ", ".join(f"d.{c.strip()}" for c in DELIVERY_COLUMNS.split(","))
        cur.execute(
            f"SELECT {columns}, d.first_at, w.url, w.secret, w.destination"
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

    def renew(self, holder: str, claims: Sequence[Claimed], until: float) -> int:
        """Move the leases ``holder`` still holds on ``claims`` (their attempt as claimed)
        to ``until``, in one transaction; how many it still held. Committed with the
        log's flush, like a claim: a renewal lost in a crash of the database would let
        another worker take a delivery whose attempt is still running."""
        held = 0
        if not claims:
            return held
        with self.db.transaction() as cur:
            for start in range(0, len(claims), CHUNK):
                chunk = claims[start : start + CHUNK]
                pairs = " OR ".join("(delivery_id = ? AND attempts = ?)" for _ in chunk)
                cur.execute(
                    f"UPDATE {DELIVERIES} SET lease_until = ?"
                    f" WHERE lease_holder = ? AND state = ? AND ({pairs})",
                    (
                        until,
                        holder,
                        PENDING,
                        *(v for c in chunk for v in (c.delivery.delivery_id, c.attempt)),
                    ),
                )
                held += max(cur.rowcount, 0)
        return held

    def finish(self, holder: str, outcomes: Sequence[Finished]) -> list[bool]:
        """Record attempts' outcomes in one transaction; for each, False when its lease
        was lost meanwhile (nothing written for it)."""
        if not outcomes:
            return []
        kept: set[str] = set()
        with self.db.transaction() as cur:
            self._no_flush_wait(cur)
            lock_webhooks(self.db.dialect, cur, [o.claimed.delivery.webhook_id for o in outcomes])
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
            promote_heads(
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
