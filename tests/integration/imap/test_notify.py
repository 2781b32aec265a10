"""NOTIFY on a watch's session against the real Dovecot: changes in the watched folders
(arrivals, flags, expunges) come as IDLE news on the one connection; folders not watched
say nothing; news that came while the session was outside IDLE is reported when IDLE
starts again; new mail in INBOX still takes the pipelined fetch; a server that hides
NOTIFY is never sent it."""

from __future__ import annotations

import contextlib
import secrets
import time
import uuid
from collections.abc import Iterator
from datetime import date, timedelta

from imapclient import IMAPClient

from application.mail.ports import Credentials, ImapEndpoint, OpenOptions
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from tests.integration.imap.conftest import OpenSession
from tests.integration.imap.test_idle import news_until, wait_readable
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

WINDOW = date.today() - timedelta(days=30)


@contextlib.contextmanager
def other_client(dovecot: DovecotServer, user: DovecotUser) -> Iterator[IMAPClient]:
    client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False)
    client.login(user.name, user.password)
    try:
        yield client
    finally:
        client.logout()


def watching(open_session: OpenSession, folders: list[str]) -> ImapMailboxSession:
    session = open_session()
    session.fetch_since(None, backfill_since=WINDOW, limit=50)
    assert session.notify_folders(folders)
    session.idle_start()
    return session


def quiet_for(session: ImapMailboxSession, seconds: float) -> bool:
    """No news of changed folders for ``seconds`` (keepalives may come)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if wait_readable(session, left) and session.idle_read().folders_changed:
            return False
    return True


def test_watched_folders_changes_are_idle_news(
    open_session: OpenSession, dovecot: DovecotServer, user: DovecotUser
) -> None:
    with other_client(dovecot, user) as other:
        other.append("Sent", make_message(subject="sent before"))
        session = watching(open_session, ["Sent", "Archive"])
        other.append("Archive", make_message(subject="archived"))
        news_until(session, "folders_changed")
        other.select_folder("Sent")
        other.add_flags([1], [b"\\Flagged"])
        news_until(session, "folders_changed")
        other.delete_messages([1])
        other.expunge()
        news_until(session, "folders_changed")
        other.append("Junk", make_message(subject="not watched"))
        assert quiet_for(session, 2.0)
        assert session.notify_folders(["Archive", "Sent"])  # the same: IDLE goes on
        other.append("Archive", make_message(subject="still pushed"))
        news_until(session, "folders_changed")


def test_inbox_news_is_unchanged_and_its_flags_count_with_notify(
    open_session: OpenSession, dovecot: DovecotServer, user: DovecotUser
) -> None:
    session = watching(open_session, ["Archive"])
    dovecot.imap_append(user, [make_message(subject="pushed")])
    news_until(session, "exists")
    batch = session.fetch_after_idle(None, backfill_since=WINDOW, limit=50)
    assert [m.ref.uid for m in batch.messages] == [1]
    session.idle_start()
    with other_client(dovecot, user) as other:
        other.select_folder("INBOX")
        other.add_flags([1], [b"\\Seen"])  # read in another client
        news_until(session, "folders_changed")


def test_news_outside_idle_is_reported_when_idle_starts(
    open_session: OpenSession, dovecot: DovecotServer, user: DovecotUser
) -> None:
    session = watching(open_session, ["Archive"])
    session.idle_done()
    with other_client(dovecot, user) as other:
        other.append("Archive", make_message(subject="while out of IDLE"))
    # Dovecot notices within its mailbox check interval (1 s here) and sends its news
    # beside the answer of a command (EXAMINE, or the IDLE command itself).
    for _ in range(20):
        time.sleep(0.5)
        session.select_inbox()
        if session.idle_start().folders_changed:
            return
        session.idle_done()
    raise AssertionError("the news was not reported when IDLE started")


def test_an_empty_folder_list_stops_the_push(
    open_session: OpenSession, dovecot: DovecotServer, user: DovecotUser
) -> None:
    session = watching(open_session, ["Archive"])
    assert not session.notify_folders([])  # NOTIFY NONE: nothing pushed now
    session.idle_start()
    with other_client(dovecot, user) as other:
        other.append("Archive", make_message(subject="no longer pushed"))
    assert quiet_for(session, 2.5)
    assert not session.notify_folders([])  # nothing to undo: no command at all


def test_a_server_without_notify_is_never_asked(blob_store: FilesystemBlobStore) -> None:
    # Dovecot still answers a NOTIFY it hides: only a refusal to send it gives False here.
    with DovecotServer(hide_capabilities=["NOTIFY"]) as hidden:
        box = hidden.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))
        provider = ImapMailProvider(
            blob_store=blob_store, settings=ImapAdapterSettings(connect_timeout=5, read_timeout=30)
        )
        endpoint = ImapEndpoint(hidden.host, hidden.port, "none", box.name)
        credentials = Credentials("password", box.password)
        with provider.open(endpoint, credentials, OpenOptions("acct-hidden")) as session:
            assert isinstance(session, ImapMailboxSession)
            session.fetch_since(None, backfill_since=WINDOW, limit=50)
            assert not session.notify_folders(["Archive"])
            session.idle_start()
            hidden.imap_append(box, [make_message(subject="still pushed by IDLE")])
            news_until(session, "exists")
