"""The poll (``AccountSync`` through ``poll_once``) against a real Cyrus IMAP 3.6
(``tests.support.cyrus``): mail ingested once with EMAILID as its identity, and flags
changed in another client mirrored by CONDSTORE (``FlagMirror``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import count_events, messages, raw_mail
from tests.support.cyrus import CyrusError, CyrusServer
from tests.support.results import ok

FLAGS_CHANGED = "tidings.mail.MessageFlagsChanged"


@pytest.fixture(scope="module")
def cyrus() -> Iterator[CyrusServer]:
    try:
        server = CyrusServer()
        server.start()
    except CyrusError as exc:  # only a failed download or start: fail loudly, never skip
        pytest.fail(f"no Cyrus test server: {exc}")
    yield server
    server.stop()


def connect_cyrus(mail: MailApp, admin: User, cyrus: CyrusServer, box: str) -> str:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": f"Cyrus {box}",
        "address": f"{box}@cyrus.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": cyrus.host, "port": cyrus.port, "security": "none", "username": box},
        "secret": "secret",
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
