"""Implements ``FolderStateStore`` on the read-model database (one row per synced folder)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from application.mail.folder_state import FOLDER_GONE, FolderRow
from application.mail.ports import MailboxCursor
from application.mail.state import ErrorKind
from application.ports import SqlCursor, SqlDatabase
from infrastructure.sql.deferred_bodies import TABLE as DEFERRED
from infrastructure.sql.flag_state import CURSORS, REMAP, UIDS

TABLE = "mail_folders"
_COLUMNS = (
    "account_id, folder_key, name, role, mailbox_id, uidvalidity, last_uid, highestmodseq,"
    " backfill_until, listed_at, last_sync_at, last_error_kind, consecutive_failures"
)
_UPSERT_LISTED = (
    f"INSERT INTO {TABLE} (account_id, folder_key, name, role, mailbox_id, uidvalidity,"
    " last_uid, highestmodseq, backfill_until, listed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (account_id, folder_key) DO UPDATE SET name = excluded.name,"
    " role = excluded.role, mailbox_id = excluded.mailbox_id,"
    " uidvalidity = excluded.uidvalidity, last_uid = excluded.last_uid,"
    " highestmodseq = excluded.highestmodseq, backfill_until = excluded.backfill_until,"
    " listed_at = excluded.listed_at"
)


class SqlFolderState:
    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (account_id TEXT NOT NULL,"
                " folder_key TEXT NOT NULL, name TEXT NOT NULL, role TEXT, mailbox_id TEXT,"
                " uidvalidity BIGINT, last_uid BIGINT, highestmodseq BIGINT,"
                " backfill_until BIGINT, listed_at TEXT, last_sync_at TEXT,"
                " last_error_kind TEXT, consecutive_failures INTEGER NOT NULL DEFAULT 0,"
                " PRIMARY KEY (account_id, folder_key))"
            )

    def folders(self, account_id: str) -> list[FolderRow]:
        return self.health([account_id]).get(account_id, [])

    def save_listing(
        self,
        account_id: str,
        rows: Sequence[FolderRow],
        gone: Iterable[str],
        at: datetime,
        *,
        renamed: Mapping[str, str] | None = None,
        vanished: Iterable[str] = (),
    ) -> None:
        listed_at = at.isoformat()
        gone_keys = sorted(set(gone))
        with self.db.transaction() as cur:
            carry_folder_names(cur, account_id, renamed or {}, sorted(set(vanished)))
            if gone_keys:
                cur.executemany(
                    f"DELETE FROM {TABLE} WHERE account_id = ? AND folder_key = ?",
                    [(account_id, key) for key in gone_keys],
                )
            cur.executemany(
                _UPSERT_LISTED,
                [
                    (
                        account_id,
                        row.folder_key,
                        row.name,
                        row.role,
                        row.mailbox_id,
                        row.uidvalidity,
                        *_cursor_values(row.cursor),
                        listed_at,
                    )
                    for row in sorted(rows, key=lambda r: r.folder_key)  # one lock order
                ],
            )

    def save_cursor(
        self, account_id: str, key: str, cursor: MailboxCursor | None, at: datetime
    ) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {TABLE} SET last_uid = ?, highestmodseq = ?, backfill_until = ?,"
                " uidvalidity = COALESCE(?, uidvalidity), last_sync_at = ?,"
                " last_error_kind = NULL, consecutive_failures = 0"
                " WHERE account_id = ? AND folder_key = ?",
                (
                    *_cursor_values(cursor),
                    None if cursor is None else cursor.uidvalidity,
                    at.isoformat(),
                    account_id,
                    key,
                ),
            )

    def record_failure(self, account_id: str, key: str, kind: ErrorKind, at: datetime) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE {TABLE} SET last_error_kind = ?,"
                " consecutive_failures = consecutive_failures + 1"
                " WHERE account_id = ? AND folder_key = ?",
                (str(kind), account_id, key),
            )

    def relist_soon(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"UPDATE {TABLE} SET listed_at = NULL WHERE account_id = ?", (account_id,))

    def health(self, account_ids: Iterable[str]) -> dict[str, list[FolderRow]]:
        ids = list(account_ids)
        if not ids:
            return {}
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_COLUMNS} FROM {TABLE} WHERE account_id IN ({', '.join('?' * len(ids))})",
                ids,
            )
            rows = cur.fetchall()
        found: dict[str, list[FolderRow]] = {}
        for row in sorted(rows, key=lambda r: (r[0], r[2] != "INBOX", r[2])):
            found.setdefault(row[0], []).append(_row(row))
        return found

    def forget(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE account_id = ?", (account_id,))


def _row(row: Sequence[Any]) -> FolderRow:
    uidvalidity, last_uid, modseq, backfill = row[5], row[6], row[7], row[8]
    cursor = None
    if uidvalidity is not None and last_uid is not None:
        cursor = MailboxCursor(
            int(uidvalidity),
            int(last_uid),
            None if modseq is None else int(modseq),
            None if backfill is None else int(backfill),
        )
    return FolderRow(
        account_id=row[0],
        folder_key=row[1],
        name=row[2],
        role=row[3],
        mailbox_id=row[4],
        uidvalidity=None if uidvalidity is None else int(uidvalidity),
        cursor=cursor,
        listed_at=datetime.fromisoformat(row[9]) if row[9] else None,
        last_sync_at=datetime.fromisoformat(row[10]) if row[10] else None,
        last_error_kind=row[11],
        consecutive_failures=int(row[12]),
    )


def _cursor_values(cursor: MailboxCursor | None) -> tuple[int | None, ...]:
    if cursor is None:
        return (None, None, None)
    return (cursor.last_uid, cursor.highestmodseq, cursor.backfill_until)


def carry_folder_names(
    cur: SqlCursor, account_id: str, renamed: Mapping[str, str], vanished: Sequence[str]
) -> None:
    """The UID map, flag cursors, the map's rebuild walk and deferred bodies follow
    renamed folders (through a name no folder has, with a control character, so two
    folders swapping names do not collide); a vanished folder's map rows are marked
    ``FOLDER_GONE`` and its flag cursor dropped."""
    pairs = sorted(renamed.items())
    for table in (UIDS, CURSORS, REMAP, DEFERRED):
        for old, new in pairs:
            if new not in renamed and table != DEFERRED:  # left under that name: no folder's
                cur.execute(
                    f"DELETE FROM {table} WHERE account_id = ? AND folder = ?", (account_id, new)
                )
            cur.execute(
                f"UPDATE {table} SET folder = ? WHERE account_id = ? AND folder = ?",
                ("\x01" + new, account_id, old),
            )
        for _, new in pairs:
            cur.execute(
                f"UPDATE {table} SET folder = ? WHERE account_id = ? AND folder = ?",
                (new, account_id, "\x01" + new),
            )
    for name in vanished:
        cur.execute(
            f"UPDATE {UIDS} SET uidvalidity = ? WHERE account_id = ? AND folder = ?",
            (FOLDER_GONE, account_id, name),
        )
        cur.execute(
            f"DELETE FROM {CURSORS} WHERE account_id = ? AND folder = ?", (account_id, name)
        )
