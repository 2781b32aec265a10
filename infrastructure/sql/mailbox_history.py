"""An account's recent sync history, for its timeline (``timeline``): counts per
five-minute bucket of syncs, failures by kind, and the tiers its watch reported.

Written beside ``mailbox_state`` in the same transactions (``SqlMailboxState``), as one
upsert statement per batch: ``(account_id, bucket, kind) -> count``. A bucket is
``BUCKET_SECONDS`` wide, so an account polled every few seconds still adds at most one
row per kind per bucket; buckets older than ``KEEP_SECONDS`` are deleted, once per
bucket and process, by one statement over an index. Not domain history: it is
operational telemetry, lost with the read model and never replayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from application.mail.state import TimelineBucket
from application.ports import SqlCursor

TABLE = "mailbox_history"
BUCKET_SECONDS = 300
KEEP_SECONDS = 48 * 3600
MAX_KIND = 80

_UPSERT = (
    f"INSERT INTO {TABLE} (account_id, bucket, kind, count) VALUES (?, ?, ?, 1)"
    f" ON CONFLICT (account_id, bucket, kind) DO UPDATE SET count = {TABLE}.count + 1"
)
_PG_UPSERT = (
    f"INSERT INTO {TABLE} (account_id, bucket, kind, count)"
    " SELECT a, b, k, 1 FROM unnest(?::text[], ?::bigint[], ?::text[]) AS t(a, b, k)"
    f" ON CONFLICT (account_id, bucket, kind) DO UPDATE SET count = {TABLE}.count + 1"
)


def create(cur: SqlCursor) -> None:
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE} (account_id TEXT NOT NULL, bucket BIGINT NOT NULL,"
        " kind TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (account_id, bucket, kind))"
    )
    cur.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_bucket ON {TABLE} (bucket)")


def bucket_of(at: datetime) -> int:
    seconds = int(at.timestamp())
    return seconds - seconds % BUCKET_SECONDS


class History:
    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._pruned_before = 0  # this process deleted every bucket before this one

    def record(self, cur: SqlCursor, entries: Sequence[tuple[str, datetime, str]]) -> None:
        """Count each (account, time, kind) in its bucket; one statement for them all."""
        if not entries:
            return
        rows = sorted({(a, bucket_of(at), kind[:MAX_KIND]) for a, at, kind in entries})
        # Two entries of one bucket in a batch would meet in one statement: PostgreSQL
        # refuses a row updated twice, so duplicates collapse above (counted once).
        if self.dialect == "postgresql":
            cur.execute(_PG_UPSERT, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(_UPSERT, rows)
        self._prune(cur, max(bucket for _, bucket, _ in rows))

    def _prune(self, cur: SqlCursor, newest: int) -> None:
        cutoff = newest - KEEP_SECONDS
        if cutoff <= self._pruned_before:
            return
        cur.execute(f"DELETE FROM {TABLE} WHERE bucket < ?", (cutoff,))
        self._pruned_before = cutoff + BUCKET_SECONDS  # again once the next bucket begins


def timeline(cur: SqlCursor, account_id: str, since: datetime) -> list[TimelineBucket]:
    cur.execute(
        f"SELECT bucket, kind, count FROM {TABLE} WHERE account_id = ? AND bucket >= ?"
        " ORDER BY bucket, kind",
        (account_id, bucket_of(since)),
    )
    return [TimelineBucket(int(b), str(k), int(c)) for b, k, c in cur.fetchall()]


def forget(cur: SqlCursor, account_ids: Iterable[str]) -> None:
    for account_id in account_ids:
        cur.execute(f"DELETE FROM {TABLE} WHERE account_id = ?", (account_id,))
