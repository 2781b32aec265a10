"""Gmail against the IMAP simulator's X-GM-EXT-1 (``bench/imap_sim_gmail.py``, a real
IMAP server on loopback): All Mail synced with X-GM-LABELS, one message whose ``folders``
are its labels, a label added or removed a ``message.moved``, a message gone from All
Mail (and not in Trash or Spam) deleted, hostile labels bounded, the UID map rebuilt by
X-GM-MSGID for messages stored before it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from bench.imap_sim import Running, password_of, running_simulator, sample_mail, user_name
from bench.imap_sim_gmail import ALL_MAIL
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import count_events, forget_uid_map, messages
from tests.support.results import ok

USER = user_name(0)
MOVED = "tidings.mail.MessageFoldersChanged"
INGESTED = "tidings.mail.MessageIngested"
DELETED = "tidings.mail.MessageDeleted"
SENT = "[Gmail]/Sent Mail"
TRASH = "[Gmail]/Trash"


@pytest.fixture
def gmail() -> Iterator[Running]:
    with running_simulator(users=1, gmail=True) as running:
        yield running


def connect_gmail(mail: MailApp, admin: User, gmail: Running) -> str:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": "Gmail",
        "address": f"{USER}@gmail.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": gmail.host, "port": gmail.port, "security": "none", "username": USER},
        "secret": password_of(USER),
    }
    account_id: str = ok(mail.app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


def polled(mail: MailApp, account_id: str) -> None:
    outcome = mail.outcome(account_id, mail.poll())
    assert outcome.error_kind is None, outcome


def test_labels_are_one_messages_folders(mail: MailApp, admin: User, gmail: Running) -> None:
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox", b"Work"})
    account_id = connect_gmail(mail, admin, gmail)
    polled(mail, account_id)
    [only] = messages(mail.app, admin, accountId=account_id)
    assert only["folders"] == ["INBOX", "Work", "[Gmail]/All Mail"]
    assert [m["subject"] for m in messages(mail.app, admin, folder="Work")] == [only["subject"]]
    assert count_events(mail.app, INGESTED) == 1
    assert gmail.call({"op": "stats"})["badCommands"] == 0


def msgid_of(gmail: Running, subject_n: int) -> int:
    box = gmail.sim.mailboxes[USER]
    wanted = f"sim {USER} {subject_n}".encode()
    for found in box.folders.values():
        for m in found:
            if m.identity is not None and b"Subject: " + wanted + b"\r\n" in m.raw:
                return m.identity.msgid
    raise AssertionError("no such message")


def relabel(gmail: Running, subject_n: int, add: list[str], remove: list[str]) -> None:
    msgid = msgid_of(gmail, subject_n)
    with IMAPClient(gmail.host, gmail.port, ssl=False, timeout=10) as client:
        client.login(USER, password_of(USER))
        client.select_folder(ALL_MAIL)
        found = [
            uid
            for uid, item in client.fetch(client.search("ALL"), ["X-GM-MSGID"]).items()
            if item[b"X-GM-MSGID"] == msgid
        ]
        if add:
            client.add_gmail_labels(found, add)
        if remove:
            client.remove_gmail_labels(found, remove)


def by_subject(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["subject"]: m for m in items}


def moved_feed(mail: MailApp, admin: User, account_id: str) -> list[dict[str, Any]]:
    mail.app.projections.catch_up()
    items = ok(mail.app.feed.read(admin, after=0, limit=500))["items"]
    return [
        i["data"]
        for i in items
        if i["type"] == "message.moved" and i["data"].get("accountId") == account_id
    ]


def test_a_label_added_or_removed_is_a_move_and_archive_and_delete_follow(
    mail: MailApp, admin: User, gmail: Running
) -> None:
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox"})
    gmail.deliver(USER, sample_mail(USER, 2), {b"\\Sent"})
    account_id = connect_gmail(mail, admin, gmail)
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    first, sent = listed[f"sim {USER} 1"], listed[f"sim {USER} 2"]
    assert first["folders"] == ["INBOX", ALL_MAIL]
    assert (sent["folders"], sent["direction"]) == ([ALL_MAIL, SENT], "outbound")
    before = count_events(mail.app, MOVED)

    relabel(gmail, 1, ["Work", "Clients/ACME"], [])
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed[f"sim {USER} 1"]["folders"] == ["Clients/ACME", "INBOX", "Work", ALL_MAIL]
    assert count_events(mail.app, MOVED) == before + 1
    assert moved_feed(mail, admin, account_id)[-1]["added"] == ["Clients/ACME", "Work"]
    polled(mail, account_id)  # nothing changed: no event
    assert count_events(mail.app, MOVED) == before + 1

    relabel(gmail, 1, [], ["\\Inbox", "Clients/ACME"])  # archived, still labelled Work
    polled(mail, account_id)
    one = by_subject(messages(mail.app, admin, accountId=account_id))[f"sim {USER} 1"]
    assert (one["folders"], one["state"]) == (["Work", ALL_MAIL], "ok")
    assert moved_feed(mail, admin, account_id)[-1]["removed"] == ["Clients/ACME", "INBOX"]
    assert messages(mail.app, admin, accountId=account_id, folder="INBOX") == []

    relabel(gmail, 1, ["\\Trash"], [])  # to Trash: out of All Mail, kept in Trash
    polled(mail, account_id)
    one = by_subject(messages(mail.app, admin, accountId=account_id))[f"sim {USER} 1"]
    assert (one["folders"], one["state"]) == ([TRASH], "ok")

    gmail.delete_forever(USER, msgid_of(gmail, 1))
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed[f"sim {USER} 1"]["state"] == "deleted"
    assert listed[f"sim {USER} 2"]["state"] == "ok"
    assert count_events(mail.app, INGESTED) == 2 and count_events(mail.app, DELETED) == 1
    assert gmail.call({"op": "stats"})["badCommands"] == 0
    rows = messages(mail.app, admin, accountId=account_id)
    mail.app.projections.rebuild()
    assert messages(mail.app, admin, accountId=account_id) == rows


def test_a_message_archived_out_of_the_inbox_between_polls_is_not_deleted(
    mail: MailApp, admin: User, gmail: Running
) -> None:
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox", b"Work"})
    account_id = connect_gmail(mail, admin, gmail)
    polled(mail, account_id)
    gmail.delete_forever(USER, msgid_of(gmail, 1))
    gmail.deliver(USER, sample_mail(USER, 3), {b"Later"})  # only in All Mail
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed[f"sim {USER} 1"]["state"] == "deleted"
    assert listed[f"sim {USER} 3"]["folders"] == ["Later", ALL_MAIL]


def test_hostile_labels_are_bounded_and_dropped(mail: MailApp, admin: User, gmail: Running) -> None:
    many = {b"L%03d" % i for i in range(150)}
    hostile = {b"ok", b"x" * 300, b"ctl\x01name", b"&Jjo-"}
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox", b"\\Important", *hostile})
    gmail.deliver(USER, sample_mail(USER, 2), many)
    gmail.deliver(USER, sample_mail(USER, 3), {b"M%04d" % i for i in range(600)})
    account_id = connect_gmail(mail, admin, gmail)
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed[f"sim {USER} 1"]["folders"] == ["INBOX", ALL_MAIL, "ok", "\u263a"]
    capped = listed[f"sim {USER} 2"]["folders"]
    assert capped == [*sorted(f"L{i:03d}" for i in range(100)), ALL_MAIL]
    # 600 labels: a line past the tokenizer's bound; its labels are unknown, so the
    # message is held where it was found, never moved on a guess.
    assert listed[f"sim {USER} 3"]["folders"] == [ALL_MAIL]
    assert listed[f"sim {USER} 3"]["state"] == "ok"
    polled(mail, account_id)
    assert mail.outcome(account_id, mail.poll()).error_kind is None


def test_the_uid_map_is_rebuilt_by_x_gm_msgid_for_messages_stored_before_it(
    mail: MailApp, admin: User, gmail: Running, database_url: str
) -> None:
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox"})
    gmail.deliver(USER, sample_mail(USER, 2), {b"Work"})
    account_id = connect_gmail(mail, admin, gmail)
    polled(mail, account_id)
    assert forget_uid_map(database_url, account_id) > 0  # as if stored before the map
    polled(mail, account_id)  # rebuilt by X-GM-MSGID
    gmail.delete_forever(USER, msgid_of(gmail, 2))
    relabel(gmail, 1, ["Later"], [])
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed[f"sim {USER} 2"]["state"] == "deleted"
    assert listed[f"sim {USER} 1"]["folders"] == ["INBOX", "Later", ALL_MAIL]


def test_racing_pollers_record_each_label_change_once(
    make_mail_app: MakeMailApp, admin: User, gmail: Running
) -> None:
    first, second = make_mail_app(), make_mail_app()
    gmail.deliver(USER, sample_mail(USER, 1), {b"\\Inbox"})
    account_id = connect_gmail(first, admin, gmail)
    polled(first, account_id)
    relabel(gmail, 1, ["Work"], ["\\Inbox"])
    done: list[Any] = []
    threads = [threading.Thread(target=lambda m=m: done.append(m.poll())) for m in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    polled(first, account_id)
    [one] = messages(first.app, admin, accountId=account_id)
    assert one["folders"] == ["Work", ALL_MAIL]
    assert count_events(first.app, MOVED) == 2  # [INBOX] -> +All Mail, then the labels
    assert count_events(first.app, INGESTED) == 1
