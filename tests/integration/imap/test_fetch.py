"""fetch_since against a real Dovecot: backfill, incremental, paging, UIDVALIDITY."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from application.mail.ports import FetchBatch, MailboxCursor, MailboxCursorInvalid
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession
from infrastructure.mime.reader import parse_message
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

WINDOW = date.today() - timedelta(days=30)
OLD = datetime.now(UTC) - timedelta(days=90)


def drain(
    session: ImapMailboxSession, cursor: MailboxCursor | None, limit: int = 200
) -> tuple[list[FetchBatch], MailboxCursor]:
    batches = []
    while True:
        batch = session.fetch_since(cursor, backfill_since=WINDOW, limit=limit)
        batches.append(batch)
        cursor = batch.new_cursor
        if not batch.has_more:
            return batches, cursor


def subjects(batch: FetchBatch) -> list[str]:
    return [parse_message(m.raw or b"").subject for m in batch.messages]


def test_backfill_window_then_incremental_then_nothing_new(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(
        user, [make_message(i, subject=f"old {i}") for i in range(3)], internal_date=OLD
    )
    dovecot.deliver(user, [make_message(i, subject=f"new {i}") for i in range(4)])
    session = open_session()

    first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
    assert subjects(first) == [f"new {i}" for i in range(4)]
    assert not first.has_more
    assert [m.uid for m in first.messages] == [4, 5, 6, 7]
    assert all(m.state == "inline" for m in first.messages)
    status = dovecot.mailbox_status(user)
    assert first.new_cursor == MailboxCursor(status["uidvalidity"], 7, status["highestmodseq"])

    dovecot.deliver(user, [make_message(i, subject=f"later {i}") for i in range(2)])
    second = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=50)
    assert subjects(second) == ["later 0", "later 1"]
    assert second.new_cursor.last_uid == 9

    third = session.fetch_since(second.new_cursor, backfill_since=WINDOW, limit=50)
    assert third.messages == () and not third.has_more
    assert third.new_cursor.last_uid == 9

    # A new session with the saved cursor carries on where the last one stopped.
    dovecot.imap_append(user, [make_message(99, subject="appended")])
    fourth = open_session().fetch_since(third.new_cursor, backfill_since=WINDOW, limit=50)
    assert subjects(fourth) == ["appended"]


def test_first_sync_of_a_mailbox_with_only_old_mail_skips_it_for_good(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(i) for i in range(3)], internal_date=OLD)
    session = open_session()
    batch = session.fetch_since(None, backfill_since=WINDOW, limit=10)
    assert batch.messages == () and batch.new_cursor.last_uid == 3
    assert session.fetch_since(batch.new_cursor, backfill_since=WINDOW, limit=10).messages == ()


def test_empty_mailbox(user: DovecotUser, open_session: OpenSession) -> None:
    batch = open_session().fetch_since(None, backfill_since=WINDOW, limit=10)
    assert batch.messages == () and not batch.has_more and batch.new_cursor.last_uid == 0


def test_paging_with_limit(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(i, subject=f"m{i}") for i in range(25)])
    batches, cursor = drain(open_session(), None, limit=10)
    assert [len(b.messages) for b in batches] == [10, 10, 5]
    assert [b.has_more for b in batches] == [True, True, False]
    assert [s for b in batches for s in subjects(b)] == [f"m{i}" for i in range(25)]
    assert cursor.last_uid == 25


def test_incremental_search_windows_cover_uid_gaps(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(i) for i in range(12)])
    settings = ImapAdapterSettings(connect_timeout=5, read_timeout=30, search_span=4)
    batches, cursor = drain(
        open_session(settings),
        MailboxCursor(dovecot.mailbox_status(user)["uidvalidity"], 0),
        limit=100,
    )
    assert [m.uid for b in batches for m in b.messages] == list(range(1, 13))
    assert cursor.last_uid == 12


def test_metadata_is_typed(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    when = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    raw = make_message(1, subject="typed")
    dovecot.deliver(user, [raw], internal_date=when, seen=True)
    (msg,) = open_session().fetch_since(None, backfill_since=WINDOW, limit=5).messages
    assert msg.ref.size == len(raw) and msg.raw == raw
    assert msg.ref.internal_date == when
    assert "\\Seen" in msg.ref.flags
    assert msg.provider_message_id.startswith("fp:")  # Dovecot 2.3 has no OBJECTID


def test_uidvalidity_change_invalidates_the_cursor_and_ids_survive(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(i) for i in range(5)])
    session = open_session()
    before, cursor = drain(session, None)
    ids_before = [m.provider_message_id for b in before for m in b.messages]
    assert len(set(ids_before)) == 5

    dovecot.set_uidvalidity(user, cursor.uidvalidity + 1000)
    with pytest.raises(MailboxCursorInvalid) as err:
        open_session().fetch_since(cursor, backfill_since=WINDOW, limit=50)
    assert (err.value.expected, err.value.actual) == (cursor.uidvalidity, cursor.uidvalidity + 1000)

    # The caller resets the cursor; dedup by provider id absorbs the re-delivery.
    again, new_cursor = drain(open_session(), None)
    assert [m.provider_message_id for b in again for m in b.messages] == ids_before
    assert new_cursor.uidvalidity == cursor.uidvalidity + 1000


def test_select_inbox_reports_condstore_state(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(1)])
    session = open_session()
    assert {"IMAP4REV1", "CONDSTORE", "IDLE"} <= session.capabilities
    status = session.select_inbox()
    expected = dovecot.mailbox_status(user)
    assert status.uidvalidity == expected["uidvalidity"]
    assert status.uidnext == expected["uidnext"] == 2
    assert status.highestmodseq == expected["highestmodseq"]
    assert status.exists == 1
    session.verify()
