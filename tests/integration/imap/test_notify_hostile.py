"""NOTIFY against a hostile server (``tests.support.hostile_imap``): a refusal leaves IDLE
as it was; an answer that never comes is cut by the operation's deadline; a flood of
STATUS lines, huge, malformed or for folders not watched, is read within the reader's
bounds and comes to one piece of news per read, never an error."""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path

import pytest

from application.mail.ports import MailboxTimeout, MailboxTransientError
from tests.integration.imap.test_hostile import open_session
from tests.integration.imap.test_idle import wait_readable
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script

SINCE = date(2020, 1, 1)
CAPS = "IMAP4rev1 IDLE NOTIFY"


@pytest.mark.parametrize("answer", ["NO", "BAD"])
def test_a_refused_notify_leaves_idle_as_it_was(tmp_path: Path, answer: str) -> None:
    script = Script([HostileMessage(1)], capabilities=CAPS, notify=answer)
    script.idle_lines = [b"* STATUS Archive (MESSAGES 9)", b"* 1 FETCH (FLAGS (\\Seen))"]
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=5.0)
        session.fetch_since(None, backfill_since=SINCE, limit=10)
        assert not session.notify_folders(["Archive"])
        news = session.idle_start()  # the session took the refusal in its stride
        if not news.heard:
            assert wait_readable(session)
            news = session.idle_read()
        assert news.heard and not news.folders_changed  # without NOTIFY: no such news
        session.close()
    assert any(b"NOTIFY SET" in c for c in server.commands)


def test_a_notify_answer_that_never_comes_is_cut_at_the_deadline(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], capabilities=CAPS, notify="never")
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=2.0, read_timeout=10.0)
        session.fetch_since(None, backfill_since=SINCE, limit=10)
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            session.notify_folders(["Archive"])
        assert time.monotonic() - started < 4.0
        session.close()


def test_a_flood_of_status_lines_is_bounded_news(tmp_path: Path) -> None:
    flood = [
        b"* STATUS Junk (MESSAGES 1)",  # a folder not watched
        b"* STATUS " + b"A" * 200_000 + b" (MESSAGES 1)",  # huge
        b'* STATUS "Archive (MESSAGES 1)',  # malformed
        b"* STATUS {7}",  # a literal name
        b"* STATUS &Jjo- (MESSAGES 1)",
    ] * 400
    script = Script([HostileMessage(1)], capabilities=CAPS, notify="OK")
    script.idle_lines = [*flood, b"* STATUS Archive (MESSAGES 2)"]
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=10.0)
        session.fetch_since(None, backfill_since=SINCE, limit=10)
        assert session.notify_folders(["Archive"])
        changed, reads = session.idle_start().folders_changed, 0
        deadline = time.monotonic() + 10
        while not changed and time.monotonic() < deadline:
            if wait_readable(session, 1.0):
                news = session.idle_read()
                changed, reads = news.folders_changed, reads + 1
                assert not news.closed
        assert changed  # the one watched folder's line, after 2,000 that are no news
        session.close()


def test_a_line_past_the_readers_bound_ends_the_session(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], capabilities=CAPS, notify="OK")
    script.idle_lines = [b"* STATUS Archive (" + b"9" * 2_000_000 + b")"]
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=10.0)
        session.fetch_since(None, backfill_since=SINCE, limit=10)
        assert session.notify_folders(["Archive"])

        def read_until_closed() -> None:
            news = session.idle_start()
            deadline = time.monotonic() + 10
            while not news.closed and time.monotonic() < deadline:
                if wait_readable(session, 1.0):
                    news = session.idle_read()

        with pytest.raises(MailboxTransientError):  # the watch restarts, with backoff
            read_until_closed()
        session.close()
