"""The mail retention sweep's read side (``ExpiringMail``): the tenants with mail, and a
tenant's messages due under its policy, found with one statement per batch over
``mail_messages`` along a partial index of the rows the stage still has to do
(``(tenant_id, received_at, message_id)`` where a body is left to erase, or where the
message is not deleted), so a batch costs the same however many messages were swept
before it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from application.mail.expiry_ports import DueMessage, MailPosition, Stage
from application.ports import SqlDatabase
from projections.mail import TABLES
from projections.mail_retention import RETENTION_PENDING

# What each stage still has to do: the WHERE of its partial index, word for word, so
# the planner uses it.
PENDING: dict[Stage, str] = {
    "bodies": RETENTION_PENDING["bodies"],
    "messages": RETENTION_PENDING["messages"],
}


class MailExpiryReader:
    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.messages = tables["messages"]

    def tenants(self) -> list[str]:
        with self.db.reading() as cur:
            cur.execute(f"SELECT DISTINCT tenant_id FROM {self.messages} ORDER BY tenant_id")
            return [str(row[0]) for row in cur.fetchall()]

    def due(
        self, tenant_id: str, stage: Stage, cutoff: str, after: MailPosition | None, limit: int
    ) -> list[DueMessage]:
        sql = (
            f"SELECT message_id, account_id, received_at FROM {self.messages}"
            f" WHERE tenant_id = ? AND {PENDING[stage]} AND received_at <= ?"
        )
        params: list[Any] = [tenant_id, cutoff]
        if after is not None:
            sql += " AND (received_at, message_id) > (?, ?)"
            params += list(after)
        sql += " ORDER BY received_at, message_id LIMIT ?"
        params.append(limit)
        with self.db.reading() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        return [DueMessage(str(m), str(a), str(r)) for m, a, r in rows]

    def refs_held_elsewhere(self, refs: Sequence[str], message_ids: Sequence[str]) -> set[str]:
        refs = sorted(set(refs))
        sql = (
            f"SELECT DISTINCT body_ref FROM {self.messages}"
            f" WHERE body_ref IN ({', '.join('?' * len(refs))})"
            f" AND message_id NOT IN ({', '.join('?' * len(message_ids))})"
        )
        with self.db.reading() as cur:
            cur.execute(sql, [*refs, *message_ids])
            return {str(row[0]) for row in cur.fetchall()}
