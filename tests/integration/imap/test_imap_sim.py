"""The fleet benchmark's IMAP simulator (``bench/imap_sim.py``) against our real IMAP
adapter: a first sync, IDLE with the pipelined push exchange, the server's own view of
logins and of sessions in IDLE — and our FETCH parser never handing over to imapclient's
(the simulator's answers are in the shape the workers read fast)."""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient

from application.mail.folders import FolderSelection, folders_to_sync
from application.mail.ports import Credentials, ImapEndpoint, MailboxAuthError, OpenOptions
from bench.imap_sim import Running, password_of, running_simulator, sample_mail, user_name
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from infrastructure.imap.fetch_response import fallback_count

WINDOW = date.today() - timedelta(days=30)


@pytest.fixture
def sim() -> Iterator[Running]:
    with running_simulator(users=3) as running:
        yield running


def open_session(
    sim: Running, tmp_path: Path, user: str, password: str | None = None
) -> ImapMailboxSession:
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
        settings=ImapAdapterSettings(connect_timeout=5, read_timeout=10),
    )
    return provider.open(
        ImapEndpoint(sim.host, sim.port, "none", user),
        Credentials("password", password or password_of(user)),
        OpenOptions(f"acct-{user}"),
    )


def wait_for_news(session: ImapMailboxSession, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(session.idle_fileno(), selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(deadline - time.monotonic()) and session.idle_read().exists:
                return True
    return False


def wait_stats(sim: Running, key: str, value: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while sim.call({"op": "stats"})[key] != value:
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} is {sim.call({'op': 'stats'})[key]}, not {value}")
        time.sleep(0.02)


def test_sync_idle_and_push_as_a_watch_does(sim: Running, tmp_path: Path) -> None:
    user = user_name(0)
    old = [sample_mail(user, 1), sample_mail(user, 2)]
    for raw in old:
        sim.deliver(user, raw)
    fallbacks = fallback_count()
    session = open_session(sim, tmp_path, user)
    try:
        first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
        assert [m.raw for m in first.messages] == old
        assert [m.ref.uid for m in first.messages] == [1, 2]
        assert first.new_cursor.last_uid == 2 and not first.has_more
        assert first.messages[0].ref.size == len(old[0])
        assert first.messages[0].ref.internal_date is not None

        session.idle_start()
        wait_stats(sim, "idleUsers", 1)
        new = sample_mail(user, 3)
        sim.deliver(user, new)
        assert wait_for_news(session), "no EXISTS pushed to the idling session"
        pushed = session.fetch_after_idle(first.new_cursor, backfill_since=WINDOW, limit=50)
        assert [m.raw for m in pushed.messages] == [new]
        assert pushed.new_cursor.last_uid == 3 and not pushed.has_more
        wait_stats(sim, "idleUsers", 1)  # the exchange ended in IDLE again

        # Nothing new: the open-ended search and the "n:*" quirk must not bring uid 3 back.
        again = session.fetch_since(pushed.new_cursor, backfill_since=WINDOW, limit=50)
        assert again.messages == () and again.new_cursor.last_uid == 3
    finally:
        session.close()
    stats = sim.call({"op": "stats"})
    assert stats["badCommands"] == 0
    assert stats["logins"] == 1
    assert fallback_count() == fallbacks, "our FETCH parser handed the answer to imapclient's"


def test_the_server_sees_a_mailbox_watched_twice(sim: Running, tmp_path: Path) -> None:
    one, two = user_name(1), user_name(2)
    sessions = [open_session(sim, tmp_path, u) for u in (one, one, two)]
    try:
        for session in sessions:
            session.fetch_since(None, backfill_since=WINDOW, limit=50)
            session.idle_start()
        wait_stats(sim, "idleUsers", 2)
        stats = sim.call({"op": "stats"})
        assert stats["doubled"] == 1 and stats["doubledUsers"] == [one]
        assert sim.call({"op": "idle"})["idle"] == {one: 2, two: 1}
        assert sim.call({"op": "logins"})["logins"] == {one: 2, two: 1}
    finally:
        for session in sessions:
            session.close()
    wait_stats(sim, "idleUsers", 0)  # dropped connections leave IDLE
    wait_stats(sim, "connections", 0)


def test_a_wrong_password_is_refused(sim: Running, tmp_path: Path) -> None:
    with pytest.raises(MailboxAuthError):
        open_session(sim, tmp_path, user_name(0), password="wrong")
    with pytest.raises(MailboxAuthError):
        open_session(sim, tmp_path, "nobody", password="pw-nobody")
    assert sim.call({"op": "stats"})["failedLogins"] == 2


def test_garbage_and_an_overlong_line_do_not_break_the_server(sim: Running) -> None:
    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        reader = sock.makefile("rb")
        assert reader.readline().startswith(b"* OK [CAPABILITY IMAP4rev1 IDLE")
        for line in (b"\r\n", b"a1\r\n", b"a2 FROB x\r\n", b"a3 UID FETCH 1:* (BODY)\r\n"):
            sock.sendall(line)
            assert b" BAD " in reader.readline(), line
        sock.sendall(b"a4 LOGIN " + b"x" * (70 * 1024))  # no line end: over the cap
        assert reader.readline() == b""  # closed
    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        reader = sock.makefile("rb")
        reader.readline()
        user = user_name(0)
        sock.sendall(f'b1 LOGIN {user} "{password_of(user)}"\r\nb2 EXAMINE INBOX\r\n'.encode())
        assert reader.readline().startswith(b"b1 OK")
        lines = [reader.readline() for _ in range(7)]
        assert lines[-1].startswith(b"b2 OK [READ-ONLY]"), lines


def test_the_folder_pass_lists_inbox_alone(sim: Running, tmp_path: Path) -> None:
    user = user_name(0)
    session = open_session(sim, tmp_path, user)
    try:
        listing = session.list_folders()
        sim.deliver(user, sample_mail(user, 1))
        batch = session.fetch_since(None, backfill_since=WINDOW, limit=10)
    finally:
        session.close()
    assert [(f.name, f.role) for f in listing.folders] == [("INBOX", "inbox")]
    assert len(batch.messages) == 1


@pytest.fixture
def gmail() -> Iterator[Running]:
    with running_simulator(users=1, gmail=True) as running:
        yield running


def gm_client(sim: Running) -> IMAPClient:
    client = IMAPClient(sim.host, sim.port, ssl=False, timeout=10)
    client.login(user_name(0), password_of(user_name(0)))
    return client


def test_gmail_folders_pick_all_mail_sent_junk_trash_and_inbox(
    gmail: Running, tmp_path: Path
) -> None:
    user = user_name(0)
    gmail.deliver(user, sample_mail(user, 1), {b"\\Inbox", b"Work"})
    session = open_session(gmail, tmp_path, user)
    try:
        assert "X-GM-EXT-1" in session.capabilities
        listing = session.list_folders()
    finally:
        session.close()
    roles = {f.name: (f.role, f.role_source, f.selectable) for f in listing.folders}
    assert roles == {
        "INBOX": ("inbox", "server", True),
        "[Gmail]": (None, None, False),
        "[Gmail]/All Mail": ("all", "server", True),
        "[Gmail]/Sent Mail": ("sent", "server", True),
        "[Gmail]/Trash": ("trash", "server", True),
        "[Gmail]/Spam": ("junk", "server", True),
        "Work": (None, None, True),
    }
    chosen = folders_to_sync(listing.folders, FolderSelection("special")).folders
    assert [f.name for f in chosen] == [
        "INBOX",
        "[Gmail]/All Mail",
        "[Gmail]/Sent Mail",
        "[Gmail]/Trash",
        "[Gmail]/Spam",
    ]
    assert gmail.call({"op": "stats"})["badCommands"] == 0


def test_one_message_in_several_labels_has_one_x_gm_msgid(gmail: Running, tmp_path: Path) -> None:
    user = user_name(0)
    gmail.deliver(user, sample_mail(user, 0), {b"\\Sent"})  # only in Sent and All Mail
    uid = gmail.deliver(user, sample_mail(user, 1), {b"\\Inbox", b"Work"})
    fallbacks = fallback_count()
    session = open_session(gmail, tmp_path, user)
    try:
        [message] = session.fetch_since(None, backfill_since=WINDOW, limit=10).messages
    finally:
        session.close()
    assert message.ref.uid == uid == 1
    assert fallback_count() == fallbacks
    with gm_client(gmail) as client:
        seen: dict[str, dict[int, int]] = {}
        for folder in ("INBOX", "Work", "[Gmail]/All Mail", "[Gmail]/Sent Mail"):
            client.select_folder(folder, readonly=True)
            answer = client.fetch(client.search("ALL"), ["X-GM-MSGID", "X-GM-THRID"])
            seen[folder] = {u: item[b"X-GM-MSGID"] for u, item in answer.items()}
            assert all(item[b"X-GM-THRID"] for item in answer.values())
        msgid = seen["INBOX"][1]
        assert message.provider_message_id == f"gm:{msgid}"  # the identity is X-GM-MSGID
        assert seen["Work"] == {1: msgid}
        assert (
            sorted(seen["[Gmail]/All Mail"]) == [1, 2]
            and msgid in seen["[Gmail]/All Mail"].values()
        )
        assert msgid not in seen["[Gmail]/Sent Mail"].values()

        # Labels move: to Trash it leaves All Mail (and keeps its X-GM-MSGID).
        client.select_folder("INBOX")
        client.add_gmail_labels([1], ["\\Trash"])
        client.remove_gmail_labels([1], ["\\Inbox"])
        assert client.search("ALL") == []
        client.select_folder("[Gmail]/Trash", readonly=True)
        [(trash_uid, item)] = client.fetch(
            client.search("ALL"), ["X-GM-MSGID", "X-GM-LABELS"]
        ).items()
        assert item[b"X-GM-MSGID"] == msgid
        assert set(item[b"X-GM-LABELS"]) == {b"\\Trash", b"Work"}
        client.select_folder("[Gmail]/All Mail", readonly=True)
        answer = client.fetch(client.search("ALL"), ["X-GM-MSGID"])
        assert msgid not in [i[b"X-GM-MSGID"] for i in answer.values()]
        # Back from Trash: a new copy in All Mail under a new UID (never reused).
        client.select_folder("[Gmail]/Trash")
        client.remove_gmail_labels([trash_uid], ["\\Trash"])
        client.select_folder("[Gmail]/All Mail", readonly=True)
        answer = client.fetch(client.search("ALL"), ["X-GM-MSGID"])
        assert {u: i[b"X-GM-MSGID"] for u, i in answer.items()}[3] == msgid


def test_gmail_refuses_hostile_label_stores(gmail: Running) -> None:
    user = user_name(0)
    gmail.deliver(user, sample_mail(user, 1))
    with socket.create_connection((gmail.host, gmail.port), timeout=5) as sock:
        reader = sock.makefile("rb")
        reader.readline()
        sock.sendall(f'a LOGIN {user} "{password_of(user)}"\r\nb SELECT INBOX\r\n'.encode())
        while not reader.readline().startswith(b"b OK"):
            pass
        many = b"(" + b" ".join(b"l%d" % i for i in range(500)) + b")"
        for store in (
            b"c UID STORE 1 +X-GM-LABELS " + many + b"\r\n",  # past the label cap
            b'c UID STORE 1 +X-GM-LABELS ("' + b"x" * 300 + b'")\r\n',  # a label too long
            b'c UID STORE 1 +X-GM-LABELS ("a\\"b")\r\n',  # a quote would break LIST
            b"c UID STORE 1 +X-GM-LABELS (\x01ctl)\r\n",  # a control character
            b"c UID STORE 1 +X-GM-LABELS Work\r\n",  # not a list
            b"c UID STORE 1 +FLAGS (\\Seen)\r\n",  # not a label move
        ):
            sock.sendall(store)
            assert reader.readline().startswith(b"c BAD"), store
    with gm_client(gmail) as client:
        client.select_folder("INBOX", readonly=True)
        assert client.get_gmail_labels([1]) == {1: ["\\Inbox"]}
