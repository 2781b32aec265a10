"""The mailbox state table: cursors (with the backfill bound) survive a round trip,
also in a table created before that column existed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from application.mail.ports import MailboxCursor
from application.mail.state import ErrorKind
from infrastructure.sql.mailbox_state import TABLE, SqlMailboxState
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


def test_record_synced_saves_a_batch_of_cursors_and_clears_failures(mail: MailApp) -> None:
    state = mail.app.ctx.mail.state
    old, new, reset = (str(uuid.uuid4()) for _ in range(3))
    state.save_cursor(old, MailboxCursor(1, 5))
    state.record_failure(old, ErrorKind.TRANSIENT, datetime.now(UTC))
    state.record_failure(old, ErrorKind.TRANSIENT, datetime.now(UTC))
    state.save_cursor(reset, MailboxCursor(3, 9))
    assert state.health([old])[old].consecutive_failures == 2
    at = datetime(2026, 12, 1, 5, 30, tzinfo=UTC)
    cursors = {
        old: MailboxCursor(1, 6, 2**40),  # an existing row: updated, failures cleared
        new: MailboxCursor(2, 10, None, backfill_until=99),  # a new row
        reset: None,  # a cursor reset (UIDVALIDITY changed)
    }
    state.record_synced(cursors, at)
    for account_id, cursor in cursors.items():
        assert state.cursor(account_id) == cursor
    health = state.health(cursors)
    assert {h.last_sync_at for h in health.values()} == {at}
    assert health[old].consecutive_failures == 0
    assert health[old].last_error_kind is None
    state.record_synced({}, at)  # nothing to do


def test_record_synced_takes_thousands_of_accounts_in_one_call(mail: MailApp) -> None:
    state = mail.app.ctx.mail.state
    cursors = {str(uuid.uuid4()): MailboxCursor(7, i, i or None) for i in range(2500)}
    state.record_synced(cursors, datetime.now(UTC))
    assert all(state.cursor(a) == c for a, c in list(cursors.items())[::250])
