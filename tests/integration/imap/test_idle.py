"""The IDLE surface of a session against a real Dovecot: new mail is noticed from the
socket, a watch fetches it without re-opening the mailbox, a kicked session reads closed."""

from __future__ import annotations

import contextlib
import dataclasses
import selectors
import time
from datetime import date, timedelta
from typing import Any
from unittest import mock

from application.mail.ports import FetchBatch
from infrastructure.imap import ImapMailboxSession, pipeline
from infrastructure.imap import idle as module
from infrastructure.imap.idle import PUSH_BODY_BYTES
from infrastructure.imap.paging import Pager
from infrastructure.imap.search import UidSearch
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

WINDOW = date.today() - timedelta(days=30)


def wait_readable(session: ImapMailboxSession, timeout: float = 10.0) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(session.idle_fileno(), selectors.EVENT_READ)
        return bool(selector.select(timeout))


def news_until(session: ImapMailboxSession, want: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if wait_readable(session, deadline - time.monotonic()):
            news = session.idle_read()
            if getattr(news, want):
                return
    raise AssertionError(f"no {want} news within {timeout}s")


def idle_sessions(dovecot: DovecotServer, user: DovecotUser, timeout: float = 5.0) -> int:
    """The user's sessions in IDLE, in the server's own view (process titles), once it
    shows one (titles change a moment after the command)."""
    deadline = time.monotonic() + timeout
    while True:
        titles = [t for t in dovecot.process_titles() if f"[{user.name} " in t]
        idle = sum(1 for t in titles if t.rstrip("]").endswith("IDLE"))
        if idle or time.monotonic() > deadline:
            return idle
        time.sleep(0.05)


def idling(open_session: OpenSession) -> tuple[ImapMailboxSession, FetchBatch]:
    """A session after its first sync, in IDLE: what a watch holds."""
    session = open_session()
    first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
    session.idle_start()
    return session, first


def test_new_mail_in_idle_is_fetched_without_reopening_the_mailbox(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(0, subject="before")])
    session = open_session()
    first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
    assert len(first.messages) == 1

    session.idle_start()
    assert not wait_readable(session, 0.2)  # nothing to say yet
    dovecot.imap_append(user, [make_message(1, subject="pushed")])
    news_until(session, "exists")
    session.idle_done()

    with (
        mock.patch.object(session, "select_inbox", side_effect=AssertionError("EXAMINE")),
        mock.patch.object(UidSearch, "search", side_effect=AssertionError("SEARCH")),
    ):
        batch = session.fetch_after_idle(first.new_cursor, backfill_since=WINDOW, limit=50)
    assert [m.uid for m in batch.messages] == [2]
    assert batch.new_cursor.last_uid == 2 and not batch.has_more

    # Nothing new after IDLE: the open-ended FETCH answers the last message; not new.
    nothing = session.fetch_after_idle(batch.new_cursor, backfill_since=WINDOW, limit=50)
    assert nothing.messages == () and nothing.new_cursor.last_uid == 2

    # The session stays usable: IDLE again, and a poll-style call re-opens the mailbox.
    session.idle_start()
    session.idle_done()
    again = session.fetch_since(batch.new_cursor, backfill_since=WINDOW, limit=50)
    assert again.messages == () and again.new_cursor.last_uid == 2


def test_a_session_the_server_drops_reads_as_closed(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, _ = idling(open_session)
    dovecot.doveadm("kick", user.name)
    news_until(session, "closed")


def test_more_new_mail_than_a_page_is_paged_after_idle(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, first = idling(open_session)
    cursor = first.new_cursor
    dovecot.imap_append(user, [make_message(i, subject=f"new {i}") for i in range(5)])
    news_until(session, "exists")
    session.idle_done()

    uids: list[int] = []
    with mock.patch.object(UidSearch, "search", side_effect=AssertionError("SEARCH")):
        first = session.fetch_after_idle(cursor, backfill_since=WINDOW, limit=2)
    uids += [m.uid for m in first.messages]
    assert first.has_more
    batch = first
    while batch.has_more:  # later pages of the pass search on, from the cursor
        batch = session.fetch_after_idle(batch.new_cursor, backfill_since=WINDOW, limit=2)
        uids += [m.uid for m in batch.messages]
    assert uids == [1, 2, 3, 4, 5] and batch.new_cursor.last_uid == 5


def no_other_commands() -> contextlib.ExitStack:
    """Fail on any command but the pipelined exchange of a fetch after IDLE."""
    stack = contextlib.ExitStack()
    for owner, name, label in (
        (ImapMailboxSession, "select_inbox", "EXAMINE"),
        (UidSearch, "search", "SEARCH"),
        (Pager, "uid_fetch", "a FETCH of its own"),
        (ImapMailboxSession, "idle_start", "IDLE of its own"),
    ):
        stack.enter_context(mock.patch.object(owner, name, side_effect=AssertionError(label)))
    return stack


def test_a_fetch_while_idling_is_one_exchange_and_leaves_the_session_idling(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, first = idling(open_session)
    cursor = first.new_cursor
    for n in range(3):  # no DONE or IDLE of the caller's anywhere
        message = make_message(n, subject=f"pushed {n}")
        dovecot.imap_append(user, [message])
        news_until(session, "exists")
        with no_other_commands():
            batch = session.fetch_after_idle(cursor, backfill_since=WINDOW, limit=50)
        assert [m.uid for m in batch.messages] == [n + 1] and not batch.has_more
        assert batch.messages[0].raw == message.replace(b"\n", b"\r\n").replace(b"\r\r", b"\r")
        cursor = batch.new_cursor
    assert idle_sessions(dovecot, user) == 1  # back in IDLE: the server's own view


def test_a_big_message_after_idle_is_fetched_whole(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, first = idling(open_session)
    cursor = first.new_cursor
    small, big = make_message(1), make_message(2, pad_to=PUSH_BODY_BYTES * 3)
    dovecot.imap_append(user, [small, big])
    news_until(session, "exists")
    batch = session.fetch_after_idle(cursor, backfill_since=WINDOW, limit=50)
    sizes = {m.uid: len(m.raw or b"") for m in batch.messages}
    assert sizes[2] > PUSH_BODY_BYTES * 2 and sizes[2] == batch.messages[1].ref.size
    assert sizes[1] == batch.messages[0].ref.size and not batch.has_more
    # The big one needed a FETCH of its own, outside IDLE: the watch's IDLE starts again.
    session.idle_start()
    dovecot.imap_append(user, [make_message(3)])
    news_until(session, "exists")


def test_idle_reports_mail_that_came_while_the_session_waited_outside_it(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    # A failover's session is opened (catch-up poll included) before its lease is free
    # and only enters IDLE later: mail that came in between must be news at IDLE.
    session = open_session()
    session.fetch_since(None, backfill_since=WINDOW, limit=50)
    dovecot.imap_append(user, [make_message(1, subject="while parked")])
    time.sleep(0.3)
    # Dovecot answers "+ idling" and "* 1 EXISTS" at once: the news may already be in
    # imaplib's buffer, where no selector sees it, so ``idle_start`` reports it.
    if not session.idle_start().exists:
        news_until(session, "exists", timeout=5)


def counting_sends() -> tuple[mock._patch[Any], list[int]]:
    """Patch the session's pipelined writes to count them."""
    calls: list[int] = []
    real = pipeline.send_pipelined

    def send(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    return mock.patch.object(module, "send_pipelined", side_effect=send), calls


def test_the_fetch_is_sent_when_idle_news_comes_and_taken_by_the_watch(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, first = idling(open_session)
    cursor = first.new_cursor
    patch, sends = counting_sends()
    with patch:
        dovecot.imap_append(user, [make_message(1, subject="pushed")])
        news_until(session, "exists")
        assert len(sends) == 1  # on its way while the news waits for a thread
        batch = session.fetch_after_idle(cursor, backfill_since=WINDOW, limit=50)
        assert len(sends) == 1  # the fetch took what was sent
    assert [m.uid for m in batch.messages] == [1] and batch.messages[0].raw
    assert idle_sessions(dovecot, user) == 1


def test_a_fetch_sent_ahead_from_another_cursor_is_read_and_not_used(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(0)])
    session, first = idling(open_session)
    dovecot.imap_append(user, [make_message(1)])
    news_until(session, "exists")  # sent from UID 1, the last page's end
    older = dataclasses.replace(first.new_cursor, last_uid=0)  # e.g. a commit that failed
    batch = session.fetch_after_idle(older, backfill_since=WINDOW, limit=50)
    assert [m.uid for m in batch.messages] == [1, 2]


def test_a_fetch_sent_ahead_and_never_taken_leaves_the_mail_news(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    session, _ = idling(open_session)
    dovecot.imap_append(user, [make_message(1)])
    news_until(session, "exists")
    # The watch could not fetch (say the store was away) and goes back to IDLE.
    assert session.idle_start().exists
    assert idle_sessions(dovecot, user) == 1
