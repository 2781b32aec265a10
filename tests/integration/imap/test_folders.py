"""Folder discovery against the real Dovecot (with its special-use folders, and started
without SPECIAL-USE, LIST-STATUS, CONDSTORE, QRESYNC and NOTIFY), hostile folders made on
its disk, and a scripted server for what Dovecot 2.3 cannot show (MAILBOXID, kilobyte
names, a malformed LIST answer)."""

from __future__ import annotations

import os
import secrets
from datetime import date
from pathlib import Path

from imapclient import IMAPClient

from application.mail.folder_listing import FolderListing
from application.mail.folders import KnownFolder, known_from, match_listing
from application.mail.ports import (
    Credentials,
    FolderDiscovery,
    ImapEndpoint,
    OpenOptions,
)
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from infrastructure.imap.folders import MAX_DEPTH
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, Script

HIDDEN = ("CONDSTORE", "QRESYNC", "NOTIFY", "SPECIAL-USE", "LIST-STATUS")
SPECIAL = {
    "Sent": "sent",
    "Archive": "archive",
    "Drafts": "drafts",
    "Junk": "junk",
    "Trash": "trash",
}


def imap(server: DovecotServer, user: DovecotUser) -> IMAPClient:
    client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
    client.login(user.name, user.password)
    return client


def make_folder_on_disk(user: DovecotUser, name: str) -> None:
    """A maildir++ folder made on the server's disk: names IMAP's CREATE refuses."""
    path = user.maildir / ("." + name)
    for sub in (path, path / "cur", path / "new", path / "tmp"):
        sub.mkdir()
        os.chown(sub, user.uid, user.gid)


def discover(session: ImapMailboxSession) -> FolderListing:
    discovery: FolderDiscovery = session
    return discovery.list_folders()


def test_dovecot_lists_its_special_use_folders_with_their_status(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    with imap(dovecot, user) as client:
        client.create_folder("Projects")
        client.create_folder("\u00dcbersicht")
    dovecot.deliver(user, [b"Subject: x\r\n\r\nbody\r\n"])
    listing = discover(open_session())
    roles = {f.name: (f.role, f.role_source) for f in listing.folders}
    assert roles == {
        "INBOX": ("inbox", "server"),
        **{name: (role, "server") for name, role in SPECIAL.items()},
        "Projects": (None, None),
        "\u00dcbersicht": (None, None),
    }
    assert listing.special_use and listing.dropped == () and listing.unroled == 0
    inbox = listing.by_name("INBOX")
    assert inbox is not None and inbox.status is not None
    assert inbox.status.messages == 1 and inbox.status.highestmodseq is not None
    assert inbox.status.uidvalidity == dovecot.mailbox_status(user)["uidvalidity"]
    assert inbox.delimiter == "." and inbox.mailbox_id is None  # 2.3 has no OBJECTID


def test_the_session_still_reads_mail_after_listing(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [b"Subject: x\r\n\r\nbody\r\n"])
    session = open_session()
    discover(session)
    batch = session.fetch_since(None, backfill_since=date(2000, 1, 1), limit=10)
    assert len(batch.messages) == 1
    assert discover(session).by_name("INBOX") is not None


def test_without_special_use_folders_are_found_by_their_names(tmp_path: Path) -> None:
    with DovecotServer(hide_capabilities=HIDDEN, special_use=False) as server:
        user = server.add_user("plain" + secrets.token_hex(4), secrets.token_urlsafe(9))
        with imap(server, user) as client:
            for name in ("Sent Messages", "Deleted Items", "Junk", "Spam", "Projects.Archive"):
                client.create_folder(name)
        session = _open(server.host, server.port, user.name, user.password, tmp_path)
        try:
            assert not session.capabilities & set(HIDDEN)
            listing = discover(session)
        finally:
            session.close()
    roles = {f.name: (f.role, f.role_source) for f in listing.folders}
    assert roles["Sent Messages"] == ("sent", "name")
    assert roles["Deleted Items"] == ("trash", "name")
    assert roles["Junk"] == roles["Spam"] == (None, None)  # two claim junk: neither
    assert roles["Projects.Archive"] == (None, None)  # nested: a project's archive
    assert not listing.special_use
    assert all(f.status is None for f in listing.folders)  # no LIST-STATUS: no status


def test_a_rename_on_dovecot_keeps_uidvalidity_but_without_mailboxid_is_gone_and_new(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    with imap(dovecot, user) as client:
        client.create_folder("Work")
    before = discover(open_session())
    known = [known_from(f) for f in before.folders]
    with imap(dovecot, user) as client:
        client.rename_folder("Work", "Job")
    after = discover(open_session())
    changes = match_listing(known, after.folders)
    assert [k.name for k in changes.gone] == ["Work"]
    assert [f.name for f in changes.added] == ["Job"]
    work, job = before.by_name("Work"), after.by_name("Job")
    assert work and job and work.status and job.status
    assert job.status.uidvalidity == work.status.uidvalidity  # what a later rule may use


def test_a_uidvalidity_reset_of_one_folder_is_seen_in_the_listing(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    with imap(dovecot, user) as client:
        client.select_folder("Sent")  # autocreated folders exist once opened
    known = [known_from(f) for f in discover(open_session()).folders]
    sent = next(k for k in known if k.name == "Sent")
    assert sent.uidvalidity is not None
    dovecot.set_uidvalidity(user, sent.uidvalidity + 1000, mailbox="Sent")
    changes = match_listing(known, discover(open_session()).folders)
    assert [(k.name, f.name) for k, f in changes.reset] == [("Sent", "Sent")]
    assert not changes.gone and not changes.added


def test_hostile_folders_on_dovecots_disk_are_left_out_and_counted(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    make_folder_on_disk(user, "ctl\x01name")
    make_folder_on_disk(user, "tab\tname")
    make_folder_on_disk(user, ".".join(["d"] * (MAX_DEPTH + 20)))  # 84 levels
    for i in range(1500):
        make_folder_on_disk(user, f"many{i:04d}")
    listing = discover(open_session(ImapAdapterSettings(connect_timeout=5, max_folders=1000)))
    names = [f.name for f in listing.folders]
    # Kept before the cap: INBOX, 5 special-use folders, 64 levels of "d", 1,500 more.
    assert dict(listing.dropped) == {
        "control_characters": 2,
        "too_deep": 20,  # the levels below the 64th (the deepest is the folder itself)
        "over_cap": 1 + 5 + MAX_DEPTH + 1500 - 1000,
    }
    assert len(names) == 1000
    assert "INBOX" in names and all(name in names for name in SPECIAL)  # roles first


def test_a_rename_keeps_the_mailbox_id_on_a_server_with_objectid(tmp_path: Path) -> None:
    caps = "IMAP4rev1 LIST-EXTENDED LIST-STATUS OBJECTID SPECIAL-USE"
    script = Script(
        capabilities=caps,
        list_lines=[b'(\\HasNoChildren) "/" INBOX', b'(\\HasNoChildren) "/" Work'],
        status_lines=[
            b"INBOX (UIDVALIDITY 1 MAILBOXID (Fin))",
            b"Work (UIDVALIDITY 9 MAILBOXID (Fw1))",
        ],
    )
    with HostileImapServer(script, lifetime=30) as server:
        first = _open(server.host, server.port, "user", "pw", tmp_path)
        known = [known_from(f) for f in discover(first).folders]
        first.close()
        script.list_lines[1] = b'(\\HasNoChildren) "/" "Work/Old Job"'
        script.status_lines[1] = b'"Work/Old Job" (UIDVALIDITY 9 MAILBOXID (Fw1))'
        second = _open(server.host, server.port, "user", "pw", tmp_path)
        listing = discover(second)
        second.close()
        sent = [c for c in server.commands if b" LIST " in c]
    assert known == [KnownFolder("INBOX", 1, "Fin"), KnownFolder("Work", 9, "Fw1")]
    changes = match_listing(known, listing.folders)
    assert [(k.name, f.name) for k, f in changes.renamed] == [("Work", "Work/Old Job")]
    assert not changes.gone and not changes.added
    assert sent[0].endswith(
        b'LIST "" "*" RETURN (SPECIAL-USE STATUS (MESSAGES UIDNEXT UIDVALIDITY))'
    )
    assert sent[1].endswith(b'LIST "" "*" RETURN (STATUS (UIDVALIDITY MAILBOXID))')


def test_a_hostile_list_answer_is_bounded_and_the_session_goes_on(tmp_path: Path) -> None:
    lines = [b'() "/" INBOX']
    lines += [b'() "/" f%05d' % i for i in range(5000)]
    lines += [b'() "/" {2000}\r\n' + b"k" * 2000]  # a kilobyte-sized name, as a literal
    lines += [b'() "/" ' + b"/".join([b"d"] * 3000)]  # three thousand levels: too long
    lines += [b'() "/" ' + b"/".join([b"e"] * 300)]  # three hundred: short enough, too deep
    lines += [b'(\\Sent \\Sent \\Sent) "/" Sent', b'(\\Sent) "/" "Sent Items"']
    lines += [b'((((((((((x)))))))))) "/" Deep', b'() "/" {5}\r\nct\x01l!', b"garbage"]
    with HostileImapServer(Script(list_lines=lines), lifetime=60) as server:
        session = _open(server.host, server.port, "user", "pw", tmp_path, max_folders=500)
        try:
            listing = discover(session)
            assert session.select_inbox().uidvalidity == 7  # the connection is still sound
        finally:
            session.close()
    assert len(listing.folders) == 500
    assert {"INBOX", "Sent"} <= {f.name for f in listing.folders}  # roles before the cap
    assert listing.unroled == 1  # the second \Sent
    assert dict(listing.dropped) == {
        "name_too_long": 2,
        "too_deep": 1,
        "malformed": 2,
        "undecodable": 1,
        "over_cap": 5000 + 3 - 500,
    }


def test_a_server_that_refuses_the_return_it_announced_gets_a_plain_list(tmp_path: Path) -> None:
    script = Script(
        capabilities="IMAP4rev1 LIST-EXTENDED LIST-STATUS SPECIAL-USE",
        list_lines=[b'() "/" INBOX', b'(\\Sent) "/" Sent'],
        refuse_list_return=True,
    )
    with HostileImapServer(script, lifetime=30) as server:
        session = _open(server.host, server.port, "user", "pw", tmp_path)
        try:
            listing = discover(session)
            assert session.select_inbox().uidvalidity == 7
        finally:
            session.close()
        lists = [c for c in server.commands if b" LIST " in c]
    assert [f.role for f in listing.folders] == ["inbox", "sent"]
    assert lists[0].endswith(b"RETURN (SPECIAL-USE STATUS (MESSAGES UIDNEXT UIDVALIDITY))")
    assert lists[1].endswith(b'LIST "" "*"')


def test_a_server_that_refuses_the_mailbox_id_list_gives_folders_without_ids(
    tmp_path: Path,
) -> None:
    script = Script(
        capabilities="IMAP4rev1 LIST-EXTENDED LIST-STATUS OBJECTID SPECIAL-USE",
        list_lines=[b'() "/" INBOX', b'(\\Sent) "/" Sent'],
        refuse_list_return=True,
    )
    with HostileImapServer(script, lifetime=30) as server:
        session = _open(server.host, server.port, "user", "pw", tmp_path)
        try:
            listing = discover(session)
            assert session.select_inbox().uidvalidity == 7
        finally:
            session.close()
        lists = [c for c in server.commands if b" LIST " in c]
    assert [(f.role, f.mailbox_id) for f in listing.folders] == [("inbox", None), ("sent", None)]
    assert lists[1].endswith(b'LIST "" "*"')  # the first, plain, after its RETURN was refused
    assert lists[2].endswith(b"RETURN (STATUS (UIDVALIDITY MAILBOXID))")  # refused: no ids


def _open(
    host: str, port: int, username: str, password: str, tmp_path: Path, *, max_folders: int = 1000
) -> ImapMailboxSession:
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
        settings=ImapAdapterSettings(connect_timeout=5, read_timeout=30, max_folders=max_folders),
    )
    return provider.open(
        ImapEndpoint(host, port, "none", username),
        Credentials("password", password),
        OpenOptions("acct-folders"),
    )
