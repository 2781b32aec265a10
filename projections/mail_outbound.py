"""The outbox as a read model: one row per outbound message (``mail_outbound``), its
state, attempts, next attempt (or, for a Sent copy to append again, its next try), the
claim of its current attempt, the server's last reply and, once the folder sync read the
Sent copy back, the stored message it became.

Subjects stay sealed, as in the events. ``projections.mail_outbound_reader`` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from application.ports import Dialect, Recorded, SqlCursor
from domain.message import MessageIngested
from domain.outbound import (
    OutboundCanceled,
    OutboundCopyRetrying,
    OutboundCopySaved,
    OutboundFailed,
    OutboundQueued,
    OutboundRetrying,
    OutboundSending,
    OutboundSent,
    OutboundUncertain,
)
from projections.base import index_name, shadow_tables
from projections.indexes import ensure_index

TABLES = {"outbound": "mail_outbound"}

# The rows a worker may have to act on (the due list's states, whatever their times): few
# beside an account's sent history, so the account's due index holds only them.
DUE_ROWS = "(state IN ('queued', 'retrying', 'sending') OR sent_copy = 'retrying')"

COLUMNS = (
    "outbound_id",
    "tenant_id",
    "account_id",
    "state",
    "subject",
    "recipients",
    "size_bytes",
    "attempts",
    "queued_by",
    "queued_at",
    "updated_at",
    "next_attempt_at",
    "lease_until",
    "last_reply",
    "error_kind",
    "sent_copy",
    "message_id",
)

_TOPICS = frozenset(
    cls.TOPIC
    for cls in (
        OutboundQueued,
        OutboundSending,
        OutboundSent,
        OutboundRetrying,
        OutboundFailed,
        OutboundUncertain,
        OutboundCanceled,
        OutboundCopySaved,
        OutboundCopyRetrying,
        MessageIngested,
    )
)


class MailOutboundProjection:
    topics = _TOPICS

    def __init__(self, tables: Mapping[str, str] = TABLES, name: str = "mail_outbound") -> None:
        self._tables = dict(tables)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> Mapping[str, str]:
        return self._tables

    def shadow(self) -> MailOutboundProjection:
        return MailOutboundProjection(shadow_tables(self._tables), name=f"{self._name}__next")

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        table = self._tables["outbound"]
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (outbound_id TEXT PRIMARY KEY,"
            " tenant_id TEXT NOT NULL, account_id TEXT NOT NULL, state TEXT NOT NULL,"
            " subject TEXT NOT NULL, recipients INTEGER NOT NULL, size_bytes BIGINT NOT NULL,"
            " attempts INTEGER NOT NULL, queued_by TEXT NOT NULL, queued_at TEXT NOT NULL,"
            " updated_at TEXT NOT NULL, next_attempt_at TEXT, lease_until TEXT,"
            " last_reply TEXT, error_kind TEXT, sent_copy TEXT, message_id TEXT)"
        )
        cur.execute(f"CREATE INDEX {index_name(table, 'due')} ON {table} (state, next_attempt_at)")
        cur.execute(
            f"CREATE INDEX {index_name(table, 'account')} ON {table} (account_id, queued_at)"
        )
        # A series pages its account's due rows from its place in the queue: this index
        # starts the scan at the place and never walks the account's settled messages
        # (with the full account index, each page read them all, and their dead
        # versions, until a vacuum).
        self.upgrade(cur, dialect)
        cur.execute(f"CREATE INDEX {index_name(table, 'tenant')} ON {table} (tenant_id, queued_at)")

    def upgrade(self, cur: SqlCursor, dialect: Dialect) -> None:
        """Outbox tables made before the due index gain it (idempotent)."""
        ensure_index(
            cur,
            dialect,
            self._tables["outbound"],
            "account_due",
            f"(account_id, queued_at, outbound_id) WHERE {DUE_ROWS}",
        )

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        # A message's changes that follow each other in the log (its `sent` with the
        # copy's record, written in one append) are one UPDATE: one row version fewer
        # for the indexes and the vacuum. Every column is set to a value, so the merged
        # changes leave the row as the updates one by one would.
        pending: tuple[str, str, dict[str, Any]] | None = None
        for recorded in batch:
            event = recorded.event
            if isinstance(event, OutboundQueued | MessageIngested):
                if pending is not None:
                    self._update(cur, *pending)
                    pending = None
                if isinstance(event, OutboundQueued):
                    self._queued(cur, event)
                else:
                    self._linked(cur, event)
                continue
            changes = _changes(event)
            if not changes:
                continue
            outbound_id, at = str(event.originator_id), event.timestamp.isoformat()
            if pending is not None and pending[0] == outbound_id:
                pending = (outbound_id, at, pending[2] | changes)
                continue
            if pending is not None:
                self._update(cur, *pending)
            pending = (outbound_id, at, changes)
        if pending is not None:
            self._update(cur, *pending)

    def _queued(self, cur: SqlCursor, e: OutboundQueued) -> None:
        at = e.timestamp.isoformat()
        row = (
            *(str(e.originator_id), e.tenant_id, e.account_id, "queued", e.subject),
            *(e.recipients, e.size_bytes, 0, e.queued_by, at, at),
        )
        cur.execute(
            f"INSERT INTO {self._tables['outbound']} ({', '.join(COLUMNS[:11])})"
            f" VALUES ({', '.join('?' * 11)}) ON CONFLICT (outbound_id) DO NOTHING",
            row,
        )

    def _linked(self, cur: SqlCursor, e: MessageIngested) -> None:
        outbound_id = e.extra.get("outboundId")
        if not isinstance(outbound_id, str):
            return
        cur.execute(
            f"UPDATE {self._tables['outbound']} SET message_id = ?"
            " WHERE outbound_id = ? AND account_id = ? AND message_id IS NULL",
            (str(e.originator_id), outbound_id, e.account_id),
        )

    def _update(self, cur: SqlCursor, outbound_id: str, at: str, changes: dict[str, Any]) -> None:
        names = ", ".join(f"{column} = ?" for column in changes)
        cur.execute(
            f"UPDATE {self._tables['outbound']} SET {names}, updated_at = ? WHERE outbound_id = ?",
            (*changes.values(), at, outbound_id),
        )


def _changes(event: object) -> dict[str, Any]:  # noqa: PLR0911 - one answer per event
    if isinstance(event, OutboundSending):
        return {"state": "sending", "attempts": event.attempt, "lease_until": event.lease_until}
    if isinstance(event, OutboundSent):
        return {"state": "sent", "last_reply": event.reply, "lease_until": None}
    if isinstance(event, OutboundRetrying):
        return {
            "state": "retrying",
            "last_reply": event.reply,
            "error_kind": event.error_kind,
            "next_attempt_at": event.next_attempt_at,
            "lease_until": None,
        }
    if isinstance(event, OutboundFailed):
        return {
            "state": "failed",
            "last_reply": event.reply,
            "error_kind": event.error_kind,
            "lease_until": None,
        }
    if isinstance(event, OutboundUncertain):
        return {"state": "uncertain", "error_kind": event.reason, "lease_until": None}
    if isinstance(event, OutboundCanceled):
        return {"state": "canceled"}
    if isinstance(event, OutboundCopySaved):
        return {"sent_copy": event.outcome}
    if isinstance(event, OutboundCopyRetrying):
        return {"sent_copy": "retrying", "next_attempt_at": event.next_attempt_at}
    return {}
