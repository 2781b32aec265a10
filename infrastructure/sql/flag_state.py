"""Implements ``FlagStateStore`` on the read-model database: the UID map
(``mail_flag_uids``: one row per (account, folder, UID), the message id and the flags last
stored, valid under its UIDVALIDITY only; the membership pass reads it whole and drops
the rows of expunged UIDs), the flag cursors (``mail_flag_cursors``: one
row per (account, folder)) and each synced folder's counters as the last complete poll
believed them (``mail_folder_seen``, ``FolderSeenStore``: what a poll may leave
unopened). Operational state, like ``mailbox_state``: a cache of the
message streams, never their truth."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from uuid import UUID

from application.mail.flag_state import FlagCursor, UidEntry
from application.mail.folder_seen import FolderSeen
from application.ports import SqlCursor, SqlDatabase

UIDS = "mail_flag_uids"
CURSORS = "mail_flag_cursors"
CLAIMS = "mail_flag_claims"
SEEN = "mail_folder_seen"
REMAP = "mail_uid_remap"  # per (account, folder): the UID the map's rebuild goes on from
_IN_CHUNK = 500  # SQLite's bound parameters per statement stay far below its limit
_UPSERT_UID = (
    f"INSERT INTO {UIDS} (account_id, folder, uid, uidvalidity, message_id, flags)"
    " {rows} ON CONFLICT (account_id, folder, uid) DO UPDATE SET"
    " uidvalidity = excluded.uidvalidity, message_id = excluded.message_id,"
    " flags = excluded.flags"
)
_SQLITE_ROW = "VALUES (?, ?, ?, ?, ?, ?)"
_PG_ROWS = (
    "SELECT * FROM unnest(?::text[], ?::text[], ?::bigint[], ?::bigint[], ?::text[], ?::text[])"
)


class SqlFlagState:
    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {UIDS} (account_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, uid BIGINT NOT NULL, uidvalidity BIGINT NOT NULL,"
                " message_id TEXT NOT NULL, flags TEXT,"
                " PRIMARY KEY (account_id, folder, uid))"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {CURSORS} (account_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, uidvalidity BIGINT NOT NULL, modseq BIGINT,"
                " sweep_from BIGINT NOT NULL, unreliable INTEGER NOT NULL,"
                " PRIMARY KEY (account_id, folder))"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {CLAIMS} (account_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, token TEXT NOT NULL, until DOUBLE PRECISION NOT NULL,"
                " PRIMARY KEY (account_id, folder))"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {SEEN} (account_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, uidvalidity BIGINT NOT NULL, uidnext BIGINT NOT NULL,"
                " messages BIGINT NOT NULL, highestmodseq BIGINT,"
                " PRIMARY KEY (account_id, folder))"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {REMAP} (account_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, uidvalidity BIGINT NOT NULL, next_uid BIGINT NOT NULL,"
                " PRIMARY KEY (account_id, folder))"
            )

    def seen(self, account_id: str) -> dict[str, FolderSeen]:
        """``FolderSeenStore``: the counters the last complete polls believed."""
        with self.db.transaction() as cur:
            cur.execute(
                f"SELECT folder, uidvalidity, uidnext, messages, highestmodseq FROM {SEEN}"
                " WHERE account_id = ?",
                (account_id,),
            )
            rows = cur.fetchall()
        return {r[0]: FolderSeen(int(r[1]), int(r[2]), int(r[3]), r[4]) for r in rows}

    def save_seen(self, account_id: str, seen: Mapping[str, FolderSeen]) -> None:
        if not seen:
            return
        with self.db.transaction() as cur:
            cur.executemany(
                f"INSERT INTO {SEEN} (account_id, folder, uidvalidity, uidnext, messages,"
                " highestmodseq) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (account_id, folder)"
                " DO UPDATE SET uidvalidity = excluded.uidvalidity, uidnext = excluded.uidnext,"
                " messages = excluded.messages, highestmodseq = excluded.highestmodseq",
                [
                    (account_id, name, s.uidvalidity, s.uidnext, s.messages, s.highestmodseq)
                    for name, s in seen.items()
                ],
            )

    def claim(self, account_id: str, folder: str, token: str, *, now: float, until: float) -> bool:
        """One statement: a new row, or an expired one taken over; then whose it is."""
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {CLAIMS} (account_id, folder, token, until) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (account_id, folder) DO UPDATE SET token = excluded.token,"
                f" until = excluded.until WHERE {CLAIMS}.until < ?",
                (account_id, folder, token, until, now),
            )
            cur.execute(
                f"SELECT token FROM {CLAIMS} WHERE account_id = ? AND folder = ?",
                (account_id, folder),
            )
            row = cur.fetchone()
        return row is not None and row[0] == token

    def release(self, account_id: str, folder: str, token: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"DELETE FROM {CLAIMS} WHERE account_id = ? AND folder = ? AND token = ?",
                (account_id, folder, token),
            )

    def remember(self, entries: Sequence[UidEntry]) -> None:
        if not entries:
            return
        with self.db.transaction() as cur:
            _upsert(cur, self.db.dialect, entries)

    def known(
        self, account_id: str, folder: str, uidvalidity: int, uids: Iterable[int]
    ) -> dict[int, UidEntry]:
        wanted = sorted(set(uids))
        found: dict[int, UidEntry] = {}
        with self.db.reading() as cur:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                marks = ", ".join("?" * len(chunk))
                cur.execute(
                    f"SELECT uid, message_id, flags FROM {UIDS} WHERE account_id = ?"
                    f" AND folder = ? AND uidvalidity = ? AND uid IN ({marks})",
                    (account_id, folder, uidvalidity, *chunk),
                )
                for uid, message_id, flags in cur.fetchall():
                    found[int(uid)] = UidEntry(
                        account_id,
                        folder,
                        uidvalidity,
                        int(uid),
                        UUID(message_id),
                        None if flags is None else tuple(json.loads(flags)),
                    )
        return found

    def mapped(self, account_id: str) -> list[UidEntry]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT folder, uidvalidity, uid, message_id, flags FROM {UIDS}"
                " WHERE account_id = ?",
                (account_id,),
            )
            rows = cur.fetchall()
        return [
            UidEntry(
                account_id,
                folder,
                int(uidvalidity),
                int(uid),
                UUID(message_id),
                None if flags is None else tuple(json.loads(flags)),
            )
            for folder, uidvalidity, uid, message_id, flags in rows
        ]

    def drop(self, entries: Sequence[UidEntry]) -> None:
        if not entries:
            return
        with self.db.transaction() as cur:
            cur.executemany(
                f"DELETE FROM {UIDS} WHERE account_id = ? AND folder = ? AND uid = ?"
                " AND uidvalidity = ?",
                [(e.account_id, e.folder, e.uid, e.uidvalidity) for e in entries],
            )

    def cursor(self, account_id: str, folder: str) -> FlagCursor | None:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT uidvalidity, modseq, sweep_from, unreliable FROM {CURSORS}"
                " WHERE account_id = ? AND folder = ?",
                (account_id, folder),
            )
            row = cur.fetchone()
        if row is None:
            return None
        uidvalidity, modseq, sweep_from, unreliable = row
        return FlagCursor(
            int(uidvalidity),
            None if modseq is None else int(modseq),
            int(sweep_from),
            bool(unreliable),
        )

    def save(
        self, account_id: str, folder: str, cursor: FlagCursor, entries: Sequence[UidEntry]
    ) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {CURSORS} (account_id, folder, uidvalidity, modseq, sweep_from,"
                " unreliable) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (account_id, folder)"
                " DO UPDATE SET uidvalidity = excluded.uidvalidity, modseq = excluded.modseq,"
                " sweep_from = excluded.sweep_from, unreliable = excluded.unreliable",
                (
                    account_id,
                    folder,
                    cursor.uidvalidity,
                    cursor.modseq,
                    cursor.sweep_from,
                    int(cursor.unreliable),
                ),
            )
            if entries:
                _upsert(cur, self.db.dialect, entries)

    def forget(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {UIDS} WHERE account_id = ?", (account_id,))
            cur.execute(f"DELETE FROM {CURSORS} WHERE account_id = ?", (account_id,))
            cur.execute(f"DELETE FROM {CLAIMS} WHERE account_id = ?", (account_id,))
            cur.execute(f"DELETE FROM {SEEN} WHERE account_id = ?", (account_id,))
            cur.execute(f"DELETE FROM {REMAP} WHERE account_id = ?", (account_id,))

    def remap_from(self, account_id: str, folder: str, uidvalidity: int) -> int:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT uidvalidity, next_uid FROM {REMAP} WHERE account_id = ? AND folder = ?",
                (account_id, folder),
            )
            row = cur.fetchone()
        return int(row[1]) if row is not None and int(row[0]) == uidvalidity else 1

    def save_remap(self, account_id: str, folder: str, uidvalidity: int, next_uid: int) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {REMAP} (account_id, folder, uidvalidity, next_uid)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (account_id, folder) DO UPDATE SET"
                " uidvalidity = excluded.uidvalidity, next_uid = excluded.next_uid",
                (account_id, folder, uidvalidity, next_uid),
            )


def _upsert(cur: SqlCursor, dialect: str, entries: Sequence[UidEntry]) -> None:
    """The UID map rows of ``entries`` (the last of one UID wins, as written in turn), in
    key order (one lock order for concurrent writers). On PostgreSQL one statement for
    them all: executemany built and sent a statement per row, holding the GIL for each,
    on the watch path's committer (every message of a burst has a row)."""
    last = {(e.account_id, e.folder, e.uid): e for e in entries}
    rows = [
        (
            e.account_id,
            e.folder,
            e.uid,
            e.uidvalidity,
            str(e.message_id),
            None if e.flags is None else json.dumps(list(e.flags)),
        )
        for _, e in sorted(last.items(), key=lambda item: item[0])
    ]
    if dialect == "postgresql":
        cur.execute(_UPSERT_UID.format(rows=_PG_ROWS), [list(c) for c in zip(*rows, strict=True)])
    else:
        cur.executemany(_UPSERT_UID.format(rows=_SQLITE_ROW), rows)
