"""tidings' IMAP session against a real Cyrus IMAP 3.6 (``tests.support.cyrus``): login,
paging with EMAILID as the message identity, IDLE push without keepalives, folder
discovery with MAILBOXID (a rename keeps it), and flags read by CONDSTORE."""

from __future__ import annotations

import selectors
import time
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient

from application.mail.flag_state import FlagCursor, FlagWindow
from application.mail.folders import known_from, match_listing
from application.mail.ports import Credentials, ImapEndpoint, OpenOptions
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from tests.support.cyrus import CyrusError, CyrusServer
from tests.support.messages import make_message

WINDOW = date.today() - timedelta(days=30)
SPECIAL = (("Sent", "\\Sent"), ("Junk", "\\Junk"), ("Trash", "\\Trash"))


@pytest.fixture(scope="module")
def cyrus() -> Iterator[CyrusServer]:
    try:
        server = CyrusServer()
        server.start()
    except CyrusError as exc:  # only a failed download or start: fail loudly, never skip
        pytest.fail(f"no Cyrus test server: {exc}")
    yield server
    server.stop()


@pytest.fixture
def box(cyrus: CyrusServer) -> str:
    return cyrus.add_user("c" + uuid.uuid4().hex[:12], SPECIAL)


@pytest.fixture
def sessions(cyrus: CyrusServer, box: str, tmp_path: Path) -> Iterator[list[ImapMailboxSession]]:
    opened: list[ImapMailboxSession] = []
    yield opened
    for session in opened:
        session.close()


def open_session(
    cyrus: CyrusServer, box: str, tmp_path: Path, opened: list[ImapMailboxSession]
) -> ImapMailboxSession:
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
        settings=ImapAdapterSettings(connect_timeout=5, read_timeout=30),
    )
    session = provider.open(
        ImapEndpoint(cyrus.host, cyrus.port, "none", box),
        Credentials("password", "secret"),
        OpenOptions("acct-" + box),
    )
    opened.append(session)
    return session


def readable(session: ImapMailboxSession, timeout: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(session.idle_fileno(), selectors.EVENT_READ)
        return bool(selector.select(timeout))


def email_ids(cyrus: CyrusServer, box: str) -> dict[int, str]:
    with cyrus.client(box) as client:
        client.select_folder("INBOX", readonly=True)
        answer = client.fetch(client.search("ALL"), ["EMAILID"])
    return {int(uid): item[b"EMAILID"][0].decode() for uid, item in answer.items()}


def test_login_paging_and_emailid_as_the_message_identity(
    cyrus: CyrusServer, box: str, tmp_path: Path, sessions: list[ImapMailboxSession]
) -> None:
    cyrus.append(box, [make_message(i, subject=f"page {i}") for i in range(5)])
    session = open_session(cyrus, box, tmp_path, sessions)
    assert {"OBJECTID", "CONDSTORE", "QRESYNC", "IDLE"} <= session.capabilities

    first = session.fetch_since(None, backfill_since=WINDOW, limit=2)
    assert [m.uid for m in first.messages] == [1, 2] and first.has_more
    rest = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=10)
    assert [m.uid for m in rest.messages] == [3, 4, 5] and not rest.has_more
    assert rest.new_cursor.highestmodseq is not None

    ids = email_ids(cyrus, box)
    got = {m.uid: m.provider_message_id for m in (*first.messages, *rest.messages)}
    assert got == {uid: f"emailid:{emailid}" for uid, emailid in ids.items()}
    assert all(m.state == "inline" and m.raw for m in (*first.messages, *rest.messages))


def test_a_copy_keeps_its_emailid_in_another_folder(cyrus: CyrusServer, box: str) -> None:
    # One message, two folders, one EMAILID: the identity follows a message, not a UID.
    [uid] = cyrus.append(box, [make_message(0, subject="moved")])
    with cyrus.client(box) as client:
        client.select_folder("INBOX")
        client.copy([uid], "Trash")
        client.select_folder("Trash", readonly=True)
        [copied] = client.fetch(client.search("ALL"), ["EMAILID"]).values()
    assert copied[b"EMAILID"][0].decode() == email_ids(cyrus, box)[uid]


def test_idle_push_arrives_and_cyrus_sends_no_keepalive(
    cyrus: CyrusServer, box: str, tmp_path: Path, sessions: list[ImapMailboxSession]
) -> None:
    session = open_session(cyrus, box, tmp_path, sessions)
    first = session.fetch_since(None, backfill_since=WINDOW, limit=10)
    session.idle_start()
    assert not readable(session, 3.0)  # no "* OK Still here" (docs/cyrus.md measures longer)

    sent = time.monotonic()
    cyrus.append(box, [make_message(1, subject="pushed")])
    deadline = sent + 10.0
    while not session.idle_read().exists:
        assert readable(session, deadline - time.monotonic()), "no EXISTS within 10 s"
    assert time.monotonic() - sent < 5.0
    session.idle_done()
    batch = session.fetch_after_idle(first.new_cursor, backfill_since=WINDOW, limit=10)
    assert [m.uid for m in batch.messages] == [1]
    assert batch.messages[0].provider_message_id.startswith("emailid:")


def test_folders_have_mailbox_ids_and_a_rename_keeps_its_id(
    cyrus: CyrusServer, box: str, tmp_path: Path, sessions: list[ImapMailboxSession]
) -> None:
    with cyrus.client(box) as client:
        client.create_folder("Projects")
    listing = open_session(cyrus, box, tmp_path, sessions).list_folders()
    roles = {f.name: (f.role, f.role_source) for f in listing.folders}
    assert roles == {
        "INBOX": ("inbox", "server"),
        "Sent": ("sent", "server"),
        "Junk": ("junk", "server"),
        "Trash": ("trash", "server"),
        "Projects": (None, None),
    }
    ids = [f.mailbox_id for f in listing.folders]
    assert all(ids) and len(set(ids)) == len(ids)
    assert all(f.status is not None and f.status.highestmodseq for f in listing.folders)
    known = [known_from(f) for f in listing.folders]

    with cyrus.client(box) as client:
        client.rename_folder("Projects", "Old Projects")
    again = open_session(cyrus, box, tmp_path, sessions).list_folders()
    changes = match_listing(known, again.folders)
    assert [(k.name, f.name) for k, f in changes.renamed] == [("Projects", "Old Projects")]
    assert not changes.gone and not changes.added and not changes.reset


def test_flags_by_condstore_on_cyrus(
    cyrus: CyrusServer, box: str, tmp_path: Path, sessions: list[ImapMailboxSession]
) -> None:
    cyrus.append(box, [make_message(i, subject=f"flag {i}") for i in range(4)])
    session = open_session(cyrus, box, tmp_path, sessions)
    window = FlagWindow(newest=2, sweep=2)
    full = session.read_flags(None, window)
    assert (full.mode, sorted(full.flags)) == ("full", [1, 2, 3, 4])
    assert full.highestmodseq is not None
    cursor = FlagCursor(full.uidvalidity, full.highestmodseq)
    assert session.read_flags(cursor, window).mode == "unchanged"

    with IMAPClient(cyrus.host, cyrus.port, ssl=False, timeout=30) as other:
        other.login(box, "secret")
        other.select_folder("INBOX")
        other.add_flags([3], [b"\\Flagged", b"$Work"])
    session.select_inbox()
    changed = session.read_flags(cursor, window)
    assert (changed.mode, sorted(changed.flags)) == ("changedsince", [3])
    assert changed.flags[3].flags == ("$Work", "\\Flagged")
