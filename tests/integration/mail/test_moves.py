"""Moves, copies, expunges and deletions against the real Dovecot (as it is, and with
CONDSTORE, QRESYNC, NOTIFY, SPECIAL-USE and LIST-STATUS hidden): one message whose
``folders`` follow the server, ``message.moved`` and ``message.deleted`` in the feed,
deletion decided per pass, a folder's UIDVALIDITY reset, racing pollers, a crash
mid-pass, a rebuild; a webhook gets a message's life in order."""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from application.errors import StoreUnavailable
from application.mail.flag_state import UidEntry
from application.mail.membership import MembershipPass, UidMap
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import RECENT, connect, count_events, messages, raw_mail
from tests.integration.mail.test_folder_sync import HIDDEN, append, by_subject, imap
from tests.integration.mail.test_hostile_servers import connect_hostile
from tests.integration.webhooks.helpers import create_webhook, delivering
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script
from tests.support.results import ok
from tests.support.webhook_receiver import Receiver

INGESTED = "tidings.mail.MessageIngested"
MOVED = "tidings.mail.MessageFoldersChanged"
DELETED = "tidings.mail.MessageDeleted"


@pytest.fixture(scope="module", params=["full", "hidden"])
def server(request: pytest.FixtureRequest, dovecot: DovecotServer) -> Iterator[DovecotServer]:
    if request.param == "full":
        yield dovecot
        return
    with DovecotServer(hide_capabilities=HIDDEN) as hidden:
        yield hidden


@pytest.fixture
def box(server: DovecotServer) -> DovecotUser:
    return server.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


def uid_of(client: IMAPClient, folder: str, subject: str) -> list[int]:
    client.select_folder(folder)
    return list(client.search(["SUBJECT", subject]))


def move(server: DovecotServer, box: DovecotUser, subject: str, source: str, to: str) -> None:
    with imap(server, box) as client:
        client.move(uid_of(client, source, subject), to)


def copy(server: DovecotServer, box: DovecotUser, subject: str, source: str, to: str) -> None:
    with imap(server, box) as client:
        client.copy(uid_of(client, source, subject), to)


def expunge(server: DovecotServer, box: DovecotUser, subject: str, folder: str) -> None:
    with imap(server, box) as client:
        client.delete_messages(uid_of(client, folder, subject))
        client.expunge()


def feed(mail: MailApp, admin: User, account_id: str) -> list[tuple[str, dict[str, Any]]]:
    mail.app.projections.catch_up()
    items = ok(mail.app.feed.read(admin, after=0, limit=500))["items"]
    return [(i["type"], i["data"]) for i in items if i["data"].get("accountId") == account_id]


def polled(mail: MailApp, account_id: str) -> None:
    outcome = mail.outcome(account_id, mail.poll())
    assert outcome.error_kind is None


def test_a_move_is_one_message_whose_folders_change(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    server.deliver(box, [raw_mail(1, subject="to archive")], internal_date=RECENT)
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    move(server, box, "to archive", "INBOX", "Archive")

    polled(mail, account_id)
    [only] = messages(mail.app, admin, accountId=account_id)
    assert (only["folders"], only["state"]) == (["Archive"], "ok")
    assert count_events(mail.app, INGESTED) == 1 and count_events(mail.app, MOVED) == 1
    assert [m["subject"] for m in messages(mail.app, admin, folder="Archive")] == ["to archive"]
    assert messages(mail.app, admin, accountId=account_id, folder="INBOX") == []
    moved = [d for t, d in feed(mail, admin, account_id) if t == "message.moved"]
    assert moved == [
        {
            "messageId": only["messageId"],
            "accountId": account_id,
            "folders": ["Archive"],
            "added": ["Archive"],
            "removed": ["INBOX"],
        }
    ]
    polled(mail, account_id)  # nothing changed: no event
    assert count_events(mail.app, MOVED) == 1


def test_a_copy_is_in_two_folders_and_gone_from_both_is_deleted(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    server.deliver(
        box, [raw_mail(1, subject="kept"), raw_mail(2, subject="copied")], internal_date=RECENT
    )
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    copy(server, box, "copied", "INBOX", "Archive")
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["copied"]["folders"] == ["Archive", "INBOX"]
    assert listed["kept"]["folders"] == ["INBOX"]
    in_inbox = messages(mail.app, admin, accountId=account_id, folder="INBOX")
    assert sorted(m["subject"] for m in in_inbox) == ["copied", "kept"]

    expunge(server, box, "copied", "INBOX")
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert (listed["copied"]["folders"], listed["copied"]["state"]) == (["Archive"], "ok")

    expunge(server, box, "copied", "Archive")
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["copied"]["state"] == "deleted" and listed["kept"]["state"] == "ok"
    assert count_events(mail.app, DELETED) == 1 and count_events(mail.app, INGESTED) == 2
    types = [t for t, d in feed(mail, admin, account_id) if d.get("messageId")]
    assert types[-3:] == ["message.moved", "message.moved", "message.deleted"]
    polled(mail, account_id)
    assert count_events(mail.app, DELETED) == 1


def test_expunged_first_and_found_elsewhere_in_the_same_pass_is_a_move(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    raw = raw_mail(1, subject="by hand")
    server.deliver(box, [raw], internal_date=RECENT)
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    expunge(server, box, "by hand", "INBOX")  # a client that deletes, then saves a copy
    append(server, box, "Archive", raw)

    polled(mail, account_id)
    [only] = messages(mail.app, admin, accountId=account_id)
    assert (only["folders"], only["state"]) == (["Archive"], "ok")
    assert count_events(mail.app, DELETED) == 0 and count_events(mail.app, INGESTED) == 1


def test_a_folder_uidvalidity_reset_deletes_nothing(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    append(server, box, "Archive", raw_mail(1, subject="a"), raw_mail(2, subject="b"))
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    before = server.mailbox_status(box, "Archive")["uidvalidity"]
    server.set_uidvalidity(box, before + 1000, "Archive")

    polled(mail, account_id)
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert {s: m["state"] for s, m in listed.items()} == {"a": "ok", "b": "ok"}
    assert count_events(mail.app, DELETED) == 0 and count_events(mail.app, MOVED) == 0

    expunge(server, box, "a", "Archive")  # under the new UIDVALIDITY
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert (listed["a"]["state"], listed["b"]["state"]) == ("deleted", "ok")


def test_racing_pollers_record_each_change_once(
    make_mail_app: MakeMailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    first, second = make_mail_app(), make_mail_app()
    server.deliver(box, [raw_mail(i, subject=f"m{i}") for i in range(4)], internal_date=RECENT)
    account_id = connect(first.app, admin, server, box)
    polled(first, account_id)
    move(server, box, "m0", "INBOX", "Archive")
    copy(server, box, "m1", "INBOX", "Archive")
    expunge(server, box, "m2", "INBOX")
    barrier = threading.Barrier(2)

    def run(app: MailApp) -> None:
        barrier.wait()
        app.syncer.sync(account_id)

    runners = [threading.Thread(target=run, args=(app,)) for app in (first, second)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(timeout=120)
    for app in (first, second):
        polled(app, account_id)
    assert count_events(first.app, MOVED) == 2 and count_events(first.app, DELETED) == 1
    listed = by_subject(messages(first.app, admin, accountId=account_id))
    assert listed["m0"]["folders"] == ["Archive"] and listed["m1"]["folders"] == [
        "Archive",
        "INBOX",
    ]
    assert listed["m2"]["state"] == "deleted" and listed["m3"]["folders"] == ["INBOX"]


class CrashingDrop:
    """The real UID map, whose next ``drop`` dies: a crash after the pass appended its
    events and before it dropped the expunged rows."""

    def __init__(self, inner: UidMap) -> None:
        self.inner, self.armed = inner, True

    def mapped(self, account_id: str) -> list[UidEntry]:
        return self.inner.mapped(account_id)

    def drop(self, entries: Sequence[UidEntry]) -> None:
        if self.armed:
            self.armed = False
            raise StoreUnavailable("the process died here")
        self.inner.drop(entries)

    def claim(self, account_id: str, folder: str, token: str, *, now: float, until: float) -> bool:
        return self.inner.claim(account_id, folder, token, now=now, until=until)

    def release(self, account_id: str, folder: str, token: str) -> None:
        self.inner.release(account_id, folder, token)


def test_a_crash_mid_pass_writes_nothing_twice_on_restart(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    server.deliver(box, [raw_mail(1, subject="m"), raw_mail(2, subject="n")], internal_date=RECENT)
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    store = mail.app.ctx.mail.flags
    assert store is not None
    mail.syncer.membership = MembershipPass(mail.app.ctx, CrashingDrop(store))
    move(server, box, "m", "INBOX", "Archive")
    expunge(server, box, "n", "INBOX")
    crashed = mail.outcome(account_id, mail.poll())
    assert crashed.error_kind is not None
    assert count_events(mail.app, MOVED) == 1 and count_events(mail.app, DELETED) == 1

    mail.syncer.membership = MembershipPass(mail.app.ctx, store)
    polled(mail, account_id)
    polled(mail, account_id)
    assert count_events(mail.app, MOVED) == 1 and count_events(mail.app, DELETED) == 1


def test_a_rebuild_gives_the_same_folders_and_states(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    server.deliver(box, [raw_mail(i, subject=f"r{i}") for i in range(3)], internal_date=RECENT)
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    move(server, box, "r0", "INBOX", "Archive")
    copy(server, box, "r1", "INBOX", "Trash")
    expunge(server, box, "r2", "INBOX")
    polled(mail, account_id)

    def answers() -> Any:
        return (
            messages(mail.app, admin, accountId=account_id),
            messages(mail.app, admin, accountId=account_id, folder="Archive"),
            messages(mail.app, admin, accountId=account_id, state="deleted"),
            feed(mail, admin, account_id),
        )

    expected = answers()
    assert len(expected[1]) == 1 and len(expected[2]) == 1
    mail.app.projections.rebuild()
    assert answers() == expected


def test_a_webhook_receives_a_messages_life_in_order(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(mailbox, [raw_mail(0, subject="life")], internal_date=RECENT)
    account_id = connect(mail.app, admin, dovecot, mailbox)
    receiver = Receiver()
    create_webhook(mail.app, admin, receiver.url, ["message."])
    try:
        polled(mail, account_id)
        move(dovecot, mailbox, "life", "INBOX", "Archive")
        polled(mail, account_id)
        copy(dovecot, mailbox, "life", "Archive", "Trash")
        polled(mail, account_id)
        expunge(dovecot, mailbox, "life", "Archive")
        expunge(dovecot, mailbox, "life", "Trash")
        polled(mail, account_id)
        with delivering(mail.app):
            got = receiver.wait_for(4)
    finally:
        receiver.stop()
    assert [r.item["type"] for r in got] == [
        "message.received",
        "message.moved",
        "message.moved",
        "message.deleted",
    ]
    assert [r.item["data"].get("folders") for r in got] == [
        ["INBOX"],
        ["Archive"],
        ["Archive", "Trash"],
        None,
    ]
    assert {r.item["data"]["messageId"] for r in got} == {got[0].item["data"]["messageId"]}


def test_flags_of_another_synced_folder_are_mirrored(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    append(server, box, "Archive", raw_mail(1, subject="old news"))
    account_id = connect(mail.app, admin, server, box)
    polled(mail, account_id)
    [before] = messages(mail.app, admin, accountId=account_id)
    assert before["unread"] is True
    with imap(server, box) as client:
        client.add_flags(uid_of(client, "Archive", "old news"), [b"\\Seen", b"$Done"])

    polled(mail, account_id)
    [after] = messages(mail.app, admin, accountId=account_id)
    assert (after["flags"], after["unread"], after["folders"]) == (
        ["$Done", "\\Seen"],
        False,
        ["Archive"],
    )
    polled(mail, account_id)
    assert count_events(mail.app, "tidings.mail.MessageFlagsChanged") == 1


def test_a_server_saying_every_uid_vanished_every_time_deletes_nothing(
    mail: MailApp, admin: User
) -> None:
    script = Script([HostileMessage(uid) for uid in (1, 2, 3)])
    with HostileImapServer(script, lifetime=120) as hostile:
        account_id = connect_hostile(mail.app, admin, hostile, "vanishing")
        assert mail.outcome(account_id, mail.poll()).ingested == 3
        script.vanish_all = True  # EXISTS 3, and UID SEARCH ALL answers nothing
        for n in range(3):  # UIDNEXT moves on while MESSAGES stays: something may have left
            script.uidnext = str(5 + n)
            polled(mail, account_id)
        searches = [c for c in hostile.commands if c.upper().endswith(b"UID SEARCH ALL")]
    assert len(searches) >= 3
    assert count_events(mail.app, DELETED) == 0
    assert {m["state"] for m in messages(mail.app, admin, accountId=account_id)} == {"ok"}


def test_a_folder_list_that_changes_every_poll_deletes_and_moves_nothing(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(mailbox, [raw_mail(1, subject="inbox")], internal_date=RECENT)
    append(dovecot, mailbox, "Archive", raw_mail(2, subject="archived"))
    append(dovecot, mailbox, "Clients", raw_mail(3, subject="client"))
    account_id = connect(mail.app, admin, dovecot, mailbox, folders=["Clients"])
    polled(mail, account_id)
    for setting in ("special", ["Clients"], "special", ["Clients"], "special"):
        update = {"accountId": account_id, "folders": setting}
        ok(mail.app.write("update-mail-account", update, admin))
        polled(mail, account_id)  # listed again each time: the synced folders change
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert {s: (m["folders"], m["state"]) for s, m in listed.items()} == {
        "inbox": (["INBOX"], "ok"),
        "archived": (["Archive"], "ok"),
        "client": (["Clients"], "ok"),
    }
    assert count_events(mail.app, MOVED) == 0 and count_events(mail.app, DELETED) == 0
    assert count_events(mail.app, INGESTED) == 3
