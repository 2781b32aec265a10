"""The mailbox state table: cursors (with the backfill bound) survive a round trip,
also in a table created before that column existed."""

from __future__ import annotations

import uuid

from application.mail.ports import MailboxCursor
from infrastructure.sync_state import TABLE, SqlMailboxState
from tests.integration.mail.conftest import MailApp


def test_cursor_round_trip_on_a_table_from_before_the_backfill_bound(mail: MailApp) -> None:
    state = mail.app.ctx.mail.state
    assert isinstance(state, SqlMailboxState)
    with state.db.transaction() as cur:
        cur.execute(f"DROP TABLE {TABLE}")
        cur.execute(
            f"CREATE TABLE {TABLE} (account_id TEXT PRIMARY KEY,"
            " uidvalidity BIGINT, last_uid BIGINT, highestmodseq BIGINT,"
            " last_sync_at TEXT, last_error_kind TEXT,"
            " consecutive_failures INTEGER NOT NULL DEFAULT 0,"
            " watch_state TEXT NOT NULL DEFAULT 'idle', tier TEXT NOT NULL DEFAULT 'warm')"
        )
        cur.execute(
            f"INSERT INTO {TABLE} (account_id, uidvalidity, last_uid) VALUES (?, ?, ?)",
            ("old", 7, 42),
        )
    state.setup()
    state.setup()  # idempotent
    assert state.cursor("old") == MailboxCursor(7, 42)

    account_id = str(uuid.uuid4())
    assert state.cursor(account_id) is None
    paging = MailboxCursor(9, 10, None, backfill_until=250)
    state.save_cursor(account_id, paging)
    assert state.cursor(account_id) == paging
    done = MailboxCursor(9, 250, 31)
    state.save_cursor(account_id, done)
    assert state.cursor(account_id) == done
    state.save_cursor(account_id, None)
    assert state.cursor(account_id) is None
