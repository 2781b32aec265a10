"""Implements ``DeferredBodies`` on the read-model database: one row per deferred message
(its account, tenant, stream and place on the server), shared by every worker; and the
fingerprint twins (version-1 id -> version-2 id, ids only) of fingerprinted messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from application.mail.deferred import DeferredBody
from application.ports import SqlDatabase

TABLE = "mail_deferred_bodies"
_COLUMNS = "account_id, tenant_id, message_id, uidvalidity, uid, size_bytes, folder"
_HOLD = (
    f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (message_id) DO UPDATE SET uidvalidity = excluded.uidvalidity,"
    " uid = excluded.uid, size_bytes = excluded.size_bytes, folder = excluded.folder"
)
TWINS = "mail_fingerprint_twins"
_CHUNK = 500  # ids per IN list


class SqlDeferredBodies:
    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (message_id TEXT PRIMARY KEY,"
                " account_id TEXT NOT NULL, tenant_id TEXT NOT NULL,"
                " uidvalidity BIGINT NOT NULL, uid BIGINT NOT NULL, size_bytes BIGINT NOT NULL,"
                " folder TEXT)"
            )
            # Tables made before entries named their folder gain it (NULL reads INBOX).
            if self.db.dialect == "postgresql":
                cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS folder TEXT")
            else:
                cur.execute(f"PRAGMA table_info({TABLE})")
                if "folder" not in {row[1] for row in cur.fetchall()}:
                    cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN folder TEXT")
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {TABLE}_place ON {TABLE}"
                " (account_id, uidvalidity, uid)"
            )
            cur.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_tenant ON {TABLE} (tenant_id)")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TWINS} (first_id TEXT PRIMARY KEY,"
                " account_id TEXT NOT NULL, message_id TEXT NOT NULL)"
            )
            cur.execute(f"CREATE INDEX IF NOT EXISTS {TWINS}_account ON {TWINS} (account_id)")

    def hold(self, entries: Sequence[DeferredBody]) -> None:
        if not entries:
            return
        with self.db.transaction() as cur:
            cur.executemany(
                _HOLD,
                [
                    (
                        e.account_id,
                        e.tenant_id,
                        e.message_id,
                        e.uidvalidity,
                        e.uid,
                        e.size_bytes,
                        e.folder,
                    )
                    for e in entries
                ],
            )

    def due(self, account_id: str, limit: int) -> list[DeferredBody]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_COLUMNS} FROM {TABLE} WHERE account_id = ?"
                " ORDER BY uidvalidity, uid LIMIT ?",
                (account_id, limit),
            )
            return [_entry(row) for row in cur.fetchall()]

    def among(self, message_ids: Iterable[str]) -> dict[str, DeferredBody]:
        found: dict[str, DeferredBody] = {}
        with self.db.reading() as cur:
            for chunk, marks in _chunks(message_ids):
                cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE message_id IN ({marks})", chunk)
                found.update((row[2], _entry(row)) for row in cur.fetchall())
        return found

    def drop(self, message_ids: Iterable[str]) -> None:
        chunks = _chunks(message_ids)
        if not chunks:
            return
        with self.db.transaction() as cur:
            for chunk, marks in chunks:
                cur.execute(f"DELETE FROM {TABLE} WHERE message_id IN ({marks})", chunk)

    def pair(self, twins: Iterable[tuple[str, str, str]]) -> None:
        rows = sorted(set(twins), key=lambda row: row[1])
        if not rows:
            return
        with self.db.transaction() as cur:
            cur.executemany(
                f"INSERT INTO {TWINS} (account_id, first_id, message_id) VALUES (?, ?, ?)"
                " ON CONFLICT (first_id) DO NOTHING",
                rows,
            )

    def paired(self, first_ids: Iterable[str]) -> set[str]:
        found: set[str] = set()
        with self.db.reading() as cur:
            for chunk, marks in _chunks(first_ids):
                cur.execute(f"SELECT first_id FROM {TWINS} WHERE first_id IN ({marks})", chunk)
                found.update(str(row[0]) for row in cur.fetchall())
        return found

    def forget_account(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE account_id = ?", (account_id,))
            cur.execute(f"DELETE FROM {TWINS} WHERE account_id = ?", (account_id,))

    def forget_tenant(self, tenant_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE tenant_id = ?", (tenant_id,))


def _chunks(ids: Iterable[str]) -> list[tuple[list[str], str]]:
    """Distinct ``ids`` in order, in lists of at most ``_CHUNK`` with their placeholders."""
    ordered = sorted(set(ids))
    return [
        (chunk, ", ".join("?" * len(chunk)))
        for chunk in (ordered[at : at + _CHUNK] for at in range(0, len(ordered), _CHUNK))
    ]


def _entry(row: Sequence[Any]) -> DeferredBody:
    account_id, tenant_id, message_id, uidvalidity, uid, size, folder = row
    return DeferredBody(
        str(account_id),
        str(tenant_id),
        str(message_id),
        int(uidvalidity),
        int(uid),
        int(size),
        str(folder) if folder is not None else "INBOX",
    )
