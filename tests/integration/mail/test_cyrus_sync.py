"""The poll (``AccountSync`` through ``poll_once``) against a real Cyrus IMAP 3.6
(``tests.support.cyrus``): mail ingested once with EMAILID as its identity, flags
changed in another client mirrored by CONDSTORE (``FlagMirror``), and the folder pass:
mail in Sent, and a rename that MAILBOXID makes a rename (nothing fetched again, the
messages' folders renamed without an event each), a folder deleted on the server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import (
    RECENT,
    accounts,
    count_events,
    forget_uid_map,
    messages,
    raw_mail,
)
from tests.support.cyrus import CyrusError, CyrusServer
from tests.support.results import ok

FLAGS_CHANGED = "tidings.mail.MessageFlagsChanged"
INGESTED = "tidings.mail.MessageIngested"
MOVED = "tidings.mail.MessageFoldersChanged"
DELETED = "tidings.mail.MessageDeleted"


@pytest.fixture(scope="module")
def cyrus() -> Iterator[CyrusServer]:
    try:
        server = CyrusServer()
        server.start()
    except CyrusError as exc:  # only a failed download or start: fail loudly, never skip
        pytest.fail(f"no Cyrus test server: {exc}")
    yield server
    server.stop()


def connect_cyrus(
    mail: MailApp, admin: User, cyrus: CyrusServer, box: str, **overrides: Any
) -> str:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": f"Cyrus {box}",
        "address": f"{box}@cyrus.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": cyrus.host, "port": cyrus.port, "security": "none", "username": box},
        "secret": "secret",
        **overrides,
    }
    account_id: str = ok(mail.app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


def test_the_poll_ingests_cyrus_mail_once_by_emailid_and_mirrors_flags(
    cyrus: CyrusServer, mail: MailApp, admin: User
) -> None:
    box = cyrus.add_user("s" + uuid.uuid4().hex[:12])
    cyrus.append(box, [raw_mail(i, subject=f"cy{i}") for i in range(3)])
    account_id = connect_cyrus(mail, admin, cyrus, box)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (3, None)

    with IMAPClient(cyrus.host, cyrus.port, ssl=False, timeout=30) as other:
        other.login(box, "secret")
        other.select_folder("INBOX")
        uids = other.search(["SUBJECT", "cy1"])
        emailids = other.fetch(other.search("ALL"), ["EMAILID"])
        other.add_flags(uids, [b"\\Seen", b"\\Flagged"])
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert sorted(listed) == ["cy0", "cy1", "cy2"]
    assert {m["providerMessageId"] for m in listed.values()} == {
        "emailid:" + item[b"EMAILID"][0].decode() for item in emailids.values()
    }
    assert all(m["unread"] for m in listed.values())

    cyrus.append(box, [raw_mail(3, subject="cy3")])
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (1, None)
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert len(listed) == 4
    assert (listed["cy1"]["unread"], listed["cy1"]["flagged"]) == (False, True)
    assert count_events(mail.app, FLAGS_CHANGED) == 1

    mail.poll()  # nothing new, nothing changed: nothing written
    assert count_events(mail.app, FLAGS_CHANGED) == 1
    assert len(messages(mail.app, admin, accountId=account_id)) == 4


def test_the_folder_pass_follows_a_rename_by_mailbox_id(
    cyrus: CyrusServer, make_mail_app: MakeMailApp, admin: User
) -> None:
    mail = make_mail_app(folder_list_interval=0)
    box = cyrus.add_user("r" + uuid.uuid4().hex[:12], [("Sent", "\\Sent")])
    with cyrus.client(box) as client:
        client.create_folder("Projects")
        client.append("Projects", raw_mail(1, subject="plan"), msg_time=RECENT)
        client.append("Sent", raw_mail(2, subject="sent one"), msg_time=RECENT)
    account_id = connect_cyrus(mail, admin, cyrus, box, folders="all")
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (2, None)
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert listed["plan"]["folders"] == ["Projects"]
    assert (listed["sent one"]["folders"], listed["sent one"]["direction"]) == (
        ["Sent"],
        "outbound",
    )

    with cyrus.client(box) as client:
        client.rename_folder("Projects", "Projects 2026")
    outcome = mail.outcome(account_id, mail.poll())
    # Same MAILBOXID: the folder is renamed, its cursor kept, nothing fetched again.
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 0, None)
    assert count_events(mail.app, "tidings.mail.MailFolderRenamed") == 1
    assert count_events(mail.app, "tidings.mail.MailFolderGone") == 0
    names = {f["name"] for f in accounts(mail.app, admin)[account_id]["folders"]}
    assert "Projects 2026" in names and "Projects" not in names
    assert count_events(mail.app, INGESTED) == 2
    # The read models renamed the folder in its messages, without an event per message:
    # the membership pass compares with the name now and finds nothing changed.
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert listed["plan"]["folders"] == ["Projects 2026"]
    found = messages(mail.app, admin, accountId=account_id, folder="Projects 2026")
    assert [m["subject"] for m in found] == ["plan"]
    assert messages(mail.app, admin, accountId=account_id, folder="Projects") == []
    assert count_events(mail.app, MOVED) == 0 and count_events(mail.app, DELETED) == 0
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert count_events(mail.app, MOVED) == 0
    before = messages(mail.app, admin, accountId=account_id)
    mail.app.projections.rebuild()
    assert messages(mail.app, admin, accountId=account_id) == before

    # A move after the rename is one event, from the name now.
    with cyrus.client(box) as client:
        client.select_folder("Projects 2026")
        client.move(client.search(["SUBJECT", "plan"]), "Sent")
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert listed["plan"]["folders"] == ["Sent"]
    assert count_events(mail.app, MOVED) == 1 and count_events(mail.app, DELETED) == 0


def test_a_folder_deleted_on_the_server_deletes_its_messages_found_nowhere_else(
    cyrus: CyrusServer, make_mail_app: MakeMailApp, admin: User
) -> None:
    mail = make_mail_app(folder_list_interval=0)
    box = cyrus.add_user("g" + uuid.uuid4().hex[:12])
    with cyrus.client(box) as client:
        client.create_folder("Old")
        client.append("Old", raw_mail(1, subject="only there"), msg_time=RECENT)
        client.append("Old", raw_mail(2, subject="copied"), msg_time=RECENT)
        client.select_folder("Old")
        client.copy(client.search(["SUBJECT", "copied"]), "INBOX")
    account_id = connect_cyrus(mail, admin, cyrus, box, folders="all")
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert listed["copied"]["folders"] == ["INBOX", "Old"]
    with cyrus.client(box) as client:
        client.delete_folder("Old")
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert (listed["only there"]["state"], listed["copied"]["folders"]) == ("deleted", ["INBOX"])
    assert count_events(mail.app, DELETED) == 1
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert count_events(mail.app, DELETED) == 1 and count_events(mail.app, INGESTED) == 2


def test_the_uid_map_is_rebuilt_by_emailid_for_messages_stored_before_it(
    cyrus: CyrusServer, mail: MailApp, admin: User, database_url: str
) -> None:
    box = cyrus.add_user("m" + uuid.uuid4().hex[:12])
    cyrus.append(box, [raw_mail(i, subject=f"old{i}") for i in range(3)])
    account_id = connect_cyrus(mail, admin, cyrus, box)
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert forget_uid_map(database_url, account_id) == 3  # as if stored before the map
    assert mail.outcome(account_id, mail.poll()).error_kind is None  # rebuilt by EMAILID
    with IMAPClient(cyrus.host, cyrus.port, ssl=False, timeout=30) as other:
        other.login(box, "secret")
        other.select_folder("INBOX")
        other.add_flags(other.search(["SUBJECT", "old1"]), [b"\\Seen"])
        other.delete_messages(other.search(["SUBJECT", "old2"]))
        other.expunge()
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = {m["subject"]: m for m in messages(mail.app, admin, accountId=account_id)}
    assert listed["old2"]["state"] == "deleted" and listed["old1"]["unread"] is False
    assert listed["old0"]["state"] == "ok"
    assert count_events(mail.app, DELETED) == 1 and count_events(mail.app, INGESTED) == 3
