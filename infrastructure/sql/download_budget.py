"""Implements ``DownloadLedger`` on the read-model database: one row per account holding
the UTC day it counts and the bytes downloaded that day.

The count lives in the database every worker of the deployment already shares (both
backends; with or without Redis), so it survives restarts and a second worker sees
what the first downloaded. One upsert adds to it atomically; a row of an earlier day
starts again from the added bytes, so no clean-up job is needed.
"""

from __future__ import annotations

from application.ports import SqlDatabase

TABLE = "mail_download_budget"
_ADD = (
    f"INSERT INTO {TABLE} (account_id, day, nbytes) VALUES (?, ?, ?)"
    " ON CONFLICT (account_id) DO UPDATE SET"
    f" nbytes = CASE WHEN {TABLE}.day >= excluded.day THEN {TABLE}.nbytes + excluded.nbytes"
    " ELSE excluded.nbytes END,"
    f" day = CASE WHEN {TABLE}.day > excluded.day THEN {TABLE}.day ELSE excluded.day END"
)


class SqlDownloadLedger:
    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (account_id TEXT PRIMARY KEY,"
                " day TEXT NOT NULL, nbytes BIGINT NOT NULL)"
            )

    def used(self, account_id: str, day: str) -> int:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT nbytes FROM {TABLE} WHERE account_id = ? AND day = ?", (account_id, day)
            )
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    def add(self, account_id: str, day: str, nbytes: int) -> None:
        with self.db.transaction() as cur:
            cur.execute(_ADD, (account_id, day, int(nbytes)))
