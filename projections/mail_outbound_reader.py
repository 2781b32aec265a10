"""The outbox's query side (``OutboxReader``): what ``list-outbound`` and
``get-outbound`` show, the messages due for an attempt, the count against a daily send
limit (the table is written by ``projections.mail_outbound``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from application.mail.outbound.ports import DuePlace
from application.ports import SqlDatabase
from projections.mail_outbound import COLUMNS, DUE_ROWS, TABLES

_KEYS = (
    "outboundId",
    "tenantId",
    "accountId",
    "state",
    "subject",
    "recipients",
    "sizeBytes",
    "attempts",
    "queuedBy",
    "queuedAt",
    "updatedAt",
    "nextAttemptAt",
    "leaseUntil",
    "lastReply",
    "errorKind",
    "sentCopy",
    "messageId",
)
_DUE = (
    "state = 'queued' OR (state = 'retrying' AND next_attempt_at <= ?)"
    " OR (state = 'sending' AND lease_until < ?)"
    " OR (state = 'sent' AND sent_copy = 'retrying' AND next_attempt_at <= ?)"
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLES['outbound']}"


def _row(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_KEYS, row, strict=True))


class OutboxReader:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    def outbound(self, tenant_id: str, outbound_id: str) -> dict[str, Any] | None:
        with self._db.reading() as cur:
            cur.execute(
                f"{_SELECT} WHERE outbound_id = ? AND tenant_id = ?", (outbound_id, tenant_id)
            )
            row = cur.fetchone()
        return None if row is None else _row(row)

    def list_outbound(
        self,
        tenant_id: str,
        account_ids: Sequence[str],
        *,
        state: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        if not account_ids:
            return []
        marks = ", ".join("?" * len(account_ids))
        sql = f"{_SELECT} WHERE tenant_id = ? AND account_id IN ({marks})"
        params: list[Any] = [tenant_id, *account_ids]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        sql += " ORDER BY queued_at DESC, outbound_id DESC LIMIT ?"
        params.append(limit)
        with self._db.reading() as cur:
            cur.execute(sql, params)
            return [_row(row) for row in cur.fetchall()]

    def due_outbound(self, now_iso: str, limit: int) -> list[tuple[str, str]]:
        with self._db.reading() as cur:
            cur.execute(
                f"SELECT outbound_id, account_id FROM {TABLES['outbound']} WHERE {_DUE}"
                " ORDER BY updated_at LIMIT ?",
                (now_iso, now_iso, now_iso, limit),
            )
            return [(str(row[0]), str(row[1])) for row in cur.fetchall()]

    def due_of_account(
        self, account_id: str, now_iso: str, limit: int, after: DuePlace | None = None
    ) -> list[DuePlace]:
        after_sql, after_params = "", []
        if after is not None:  # a row value: the index's range starts at the place
            after_sql = " AND (queued_at, outbound_id) > (?, ?)"
            after_params = [after.queued_at, after.outbound_id]
        with self._db.reading() as cur:
            # DUE_ROWS repeats the partial index's own condition, which SQLite needs
            # word for word to use it (PostgreSQL proves it from the due list's).
            cur.execute(
                f"SELECT queued_at, outbound_id FROM {TABLES['outbound']} WHERE account_id = ?"
                f"{after_sql} AND {DUE_ROWS} AND ({_DUE}) ORDER BY queued_at, outbound_id LIMIT ?",
                (account_id, *after_params, now_iso, now_iso, now_iso, limit),
            )
            return [DuePlace(str(row[0]), str(row[1])) for row in cur.fetchall()]

    def queued_since(self, account_id: str, since_iso: str) -> int:
        with self._db.reading() as cur:
            cur.execute(
                f"SELECT COUNT(*) FROM {TABLES['outbound']}"
                " WHERE account_id = ? AND queued_at >= ? AND state <> 'canceled'",
                (account_id, since_iso),
            )
            row = cur.fetchone()
        return int(row[0]) if row else 0
