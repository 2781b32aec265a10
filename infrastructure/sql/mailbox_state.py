"""Implements ``MailboxStateStore`` on the read-model database (one row per account)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

from application.mail.ports import MailboxCursor
from application.mail.state import ErrorKind, MailboxHealth, TimelineBucket
from application.ports import SqlCursor, SqlDatabase
from infrastructure.sql import mailbox_history

TABLE = "mailbox_state"
_RECORD_SYNCED = (
    f"INSERT INTO {TABLE} (account_id, uidvalidity, last_uid, highestmodseq,"
    " backfill_until, last_sync_at) {rows}"
    " ON CONFLICT (account_id) DO UPDATE SET uidvalidity = excluded.uidvalidity,"
    " last_uid = excluded.last_uid, highestmodseq = excluded.highestmodseq,"
    " backfill_until = excluded.backfill_until,"
    " last_sync_at = excluded.last_sync_at, last_error_kind = NULL,"
    " consecutive_failures = 0"
)
_SQLITE_ROW = "VALUES (?, ?, ?, ?, ?, ?)"
_SET_WATCH = (
    f"INSERT INTO {TABLE} (account_id, watch_state, tier, watch_worker) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (account_id) DO UPDATE SET watch_state = excluded.watch_state,"
    " tier = excluded.tier, watch_worker = excluded.watch_worker"
)
# Only the row's last writer clears it: the account's new holder may have written since.
_CLEAR_WATCH = (
    f"UPDATE {TABLE} SET watch_state = 'idle', tier = 'warm', watch_worker = NULL"
    " WHERE account_id = ? AND watch_worker = ?"
)
_PG_ROWS = (
    "SELECT * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[])"
)


class SqlMailboxState:
    def __init__(self, db: SqlDatabase) -> None:
        self.db = db
        self.history = mailbox_history.History(db.dialect)

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (account_id TEXT PRIMARY KEY,"
                " uidvalidity BIGINT, last_uid BIGINT, highestmodseq BIGINT,"
                " last_sync_at TEXT, last_error_kind TEXT,"
                " consecutive_failures INTEGER NOT NULL DEFAULT 0,"
                " watch_state TEXT NOT NULL DEFAULT 'idle', tier TEXT NOT NULL DEFAULT 'warm',"
                " backfill_until BIGINT, watch_worker TEXT)"
            )
            self._add_columns(cur, {"backfill_until": "BIGINT", "watch_worker": "TEXT"})
            mailbox_history.create(cur)

    def _add_columns(self, cur: SqlCursor, columns: dict[str, str]) -> None:
        """Tables created before a column was kept gain it."""
        if self.db.dialect == "postgresql":
            for name, kind in columns.items():
                cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {name} {kind}")
            return
        cur.execute(f"PRAGMA table_info({TABLE})")
        present = {row[1] for row in cur.fetchall()}
        for name, kind in columns.items():
            if name not in present:
                cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}")

    def _upsert(self, account_id: str, assignments: str, params: tuple[object, ...]) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {TABLE} (account_id) VALUES (?) ON CONFLICT (account_id) DO NOTHING",
                (account_id,),
            )
            cur.execute(
                f"UPDATE {TABLE} SET {assignments} WHERE account_id = ?", (*params, account_id)
            )

    def cursor(self, account_id: str) -> MailboxCursor | None:
        return self.cursors([account_id]).get(account_id)

    def cursors(self, account_ids: Collection[str]) -> dict[str, MailboxCursor]:
        ids = list(account_ids)
        if not ids:
            return {}
        with self.db.reading() as cur:
            cur.execute(
                "SELECT account_id, uidvalidity, last_uid, highestmodseq, backfill_until"
                f" FROM {TABLE} WHERE account_id IN ({', '.join('?' * len(ids))})",
                ids,
            )
            rows = cur.fetchall()
        return {
            row[0]: MailboxCursor(
                int(row[1]),
                int(row[2]),
                None if row[3] is None else int(row[3]),
                None if row[4] is None else int(row[4]),
            )
            for row in rows
            if row[1] is not None
        }

    def save_cursor(self, account_id: str, cursor: MailboxCursor | None) -> None:
        self._upsert(
            account_id,
            "uidvalidity = ?, last_uid = ?, highestmodseq = ?, backfill_until = ?",
            _cursor_values(cursor),
        )

    def record_synced(self, cursors: Mapping[str, MailboxCursor | None], at: datetime) -> None:
        if not cursors:
            return
        synced_at = at.isoformat()
        rows = [
            (account_id, *_cursor_values(cursors[account_id]), synced_at)
            for account_id in sorted(cursors)  # one lock order for concurrent writers
        ]
        with self.db.transaction() as cur:
            if self.db.dialect == "postgresql":
                # One statement for the batch (thousands of accounts in a burst of mail):
                # executemany built and sent one per account, holding the GIL for each.
                cur.execute(
                    _RECORD_SYNCED.format(rows=_PG_ROWS), [list(c) for c in zip(*rows, strict=True)]
                )
            else:
                cur.executemany(_RECORD_SYNCED.format(rows=_SQLITE_ROW), rows)
            self.history.record(cur, [(account_id, at, "synced") for account_id in cursors])

    def record_failure(self, account_id: str, error_kind: ErrorKind, at: datetime) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {TABLE} (account_id) VALUES (?) ON CONFLICT (account_id) DO NOTHING",
                (account_id,),
            )
            cur.execute(
                f"UPDATE {TABLE} SET last_error_kind = ?,"
                " consecutive_failures = consecutive_failures + 1 WHERE account_id = ?",
                (error_kind, account_id),
            )
            self.history.record(cur, [(account_id, at, f"failed:{error_kind}")])

    def record_watches(self, worker_id: str, changes: Mapping[str, tuple[str, str] | None]) -> None:
        sets: list[tuple[str, str, str, str]] = []
        clears: list[tuple[str, str]] = []
        for account_id in sorted(changes):  # one lock order for concurrent writers
            status = changes[account_id]
            if status is None:
                clears.append((account_id, worker_id))
            else:
                sets.append((account_id, *status, worker_id))
        # The port passes no time for watch reports: they are this moment's.
        now = datetime.now(UTC)
        with self.db.transaction() as cur:
            if sets:
                cur.executemany(_SET_WATCH, sets)
                self.history.record(cur, [(s[0], now, f"tier:{s[2]}") for s in sets])
            if clears:
                cur.executemany(_CLEAR_WATCH, clears)

    def health(self, account_ids: Iterable[str]) -> dict[str, MailboxHealth]:
        ids = list(account_ids)
        if not ids:
            return {}
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT account_id, last_sync_at, last_error_kind, consecutive_failures,"
                f" watch_state, tier FROM {TABLE}"
                f" WHERE account_id IN ({', '.join('?' * len(ids))})",
                ids,
            )
            rows = cur.fetchall()
        return {
            row[0]: MailboxHealth(
                account_id=row[0],
                last_sync_at=datetime.fromisoformat(row[1]) if row[1] else None,
                last_error_kind=row[2],
                consecutive_failures=int(row[3]),
                watch_state=row[4],
                tier=row[5],
            )
            for row in rows
        }

    def timeline(self, account_id: str, since: datetime) -> list[TimelineBucket]:
        with self.db.reading() as cur:
            return mailbox_history.timeline(cur, account_id, since)

    def forget(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE account_id = ?", (account_id,))
            mailbox_history.forget(cur, [account_id])


def _cursor_values(cursor: MailboxCursor | None) -> tuple[int | None, ...]:
    if cursor is None:
        return (None, None, None, None)
    return (cursor.uidvalidity, cursor.last_uid, cursor.highestmodseq, cursor.backfill_until)
