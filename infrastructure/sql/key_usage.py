"""Implements ``KeyUsage`` on the read-model database: one row per API key holding its
last use (ISO 8601, UTC).

A key is used on every request; the row is written at most once per ``every`` seconds
per key and process (``lastUsedAt`` is as exact as that), so a busy key costs one
write a minute, not one a request. The memo of recent writes is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import datetime

from application.ports import SqlDatabase

TABLE = "api_key_usage"
MEMO_LIMIT = 10_000
_TOUCH = (
    f"INSERT INTO {TABLE} (key_id, last_used) VALUES (?, ?)"
    " ON CONFLICT (key_id) DO UPDATE SET last_used = CASE"
    f" WHEN {TABLE}.last_used > excluded.last_used THEN {TABLE}.last_used"
    " ELSE excluded.last_used END"
)


class SqlKeyUsage:
    def __init__(self, db: SqlDatabase, *, every: float = 60.0) -> None:
        self.db = db
        self._every = every
        self._written: dict[str, float] = {}  # key id -> monotonic time of the last write
        self._lock = threading.Lock()

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (key_id TEXT PRIMARY KEY,"
                " last_used TEXT NOT NULL)"
            )

    def touch(self, key_id: str, at: datetime) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._written.get(key_id)
            if last is not None and now - last < self._every:
                return
            if len(self._written) >= MEMO_LIMIT:
                self._written.clear()
            self._written[key_id] = now
        with self.db.transaction() as cur:
            cur.execute(_TOUCH, (key_id, at.isoformat()))

    def last_used(self, key_ids: Iterable[str]) -> dict[str, datetime]:
        ids = list(key_ids)
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        with self.db.reading() as cur:
            cur.execute(f"SELECT key_id, last_used FROM {TABLE} WHERE key_id IN ({marks})", ids)
            rows = cur.fetchall()
        return {str(key_id): datetime.fromisoformat(str(used)) for key_id, used in rows}
