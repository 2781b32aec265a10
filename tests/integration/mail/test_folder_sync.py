"""The poll's folder pass against the real Dovecot (with its special-use folders, and a
server that hides SPECIAL-USE, LIST-STATUS, CONDSTORE, QRESYNC and NOTIFY): mail in
Archive and Sent, direction, one message seen in two folders, a folder's UIDVALIDITY
reset, a rename, racing pollers, a restart, a rebuild, the ``folders`` setting."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from infrastructure.imap.folders import MAX_DEPTH
from tests.integration.imap.test_folders import make_folder_on_disk
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import (
    RECENT,
    accounts,
    connect,
    connect_payload,
    count_events,
    messages,
    raw_mail,
    threads,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

INGESTED = "tidings.mail.MessageIngested"
LISTED = "tidings.mail.MailFolderListed"
HIDDEN = ("CONDSTORE", "QRESYNC", "NOTIFY", "SPECIAL-USE", "LIST-STATUS")


def append(server: DovecotServer, box: DovecotUser, folder: str, *raws: bytes) -> None:
    """APPEND into ``folder`` (created when missing), as a mail client saves mail."""
    with IMAPClient(server.host, server.port, ssl=False, timeout=30) as client:
        client.login(box.name, box.password)
        if not client.folder_exists(folder):
            client.create_folder(folder)
        for raw in raws:
            client.append(folder, raw, msg_time=RECENT)


def imap(server: DovecotServer, box: DovecotUser) -> IMAPClient:
    client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
    client.login(box.name, box.password)
    return client


def by_subject(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["subject"]: item for item in items}


def folder_health(app: MailApp, admin: User, account_id: str) -> dict[str, dict[str, Any]]:
    health = accounts(app.app, admin)[account_id]["health"]
    return {f["name"]: f for f in health["folders"]}


def test_mail_in_archive_is_ingested_with_its_folder(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(mailbox, [raw_mail(1, subject="in inbox")], internal_date=RECENT)
    append(dovecot, mailbox, "Archive", raw_mail(2, subject="archived a"))
    append(dovecot, mailbox, "Archive", raw_mail(3, subject="archived b"))
    account_id = connect(mail.app, admin, dovecot, mailbox)

    first = mail.outcome(account_id, mail.poll())
    assert (first.ingested, first.duplicates, first.error_kind) == (3, 0, None)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["in inbox"]["folders"] == ["INBOX"]
    assert listed["archived a"]["folders"] == ["Archive"]
    assert listed["archived a"]["folder"] == "Archive"
    assert {m["direction"] for m in listed.values()} == {"inbound"}
    archive = messages(mail.app, admin, accountId=account_id, folder="Archive")
    assert sorted(m["subject"] for m in archive) == ["archived a", "archived b"]
    got = ok(mail.app.query("get-message", {"messageId": listed["archived b"]["messageId"]}, admin))
    assert (got["folders"], got["direction"]) == (["Archive"], "inbound")

    health = folder_health(mail, admin, account_id)
    assert set(health) == {"INBOX", "Sent", "Archive", "Drafts", "Junk", "Trash"}
    named = accounts(mail.app, admin)[account_id]["folders"]
    assert named[0] == {"name": "INBOX", "role": "inbox"}
    assert {"name": "Archive", "role": "archive"} in named and len(named) == 6
    assert count_events(mail.app, LISTED) == 6
    assert health["Archive"]["role"] == "archive" and health["INBOX"]["role"] == "inbox"
    assert health["Archive"]["lastSyncAt"] is not None
    assert health["Archive"]["lastErrorKind"] is None

    append(dovecot, mailbox, "Archive", raw_mail(4, subject="archived later"))
    second = mail.outcome(account_id, mail.poll())
    assert (second.ingested, second.duplicates) == (1, 0)
    assert count_events(mail.app, INGESTED) == 4
    assert count_events(mail.app, LISTED) == 6  # within the interval: not listed again


def test_a_reply_saved_in_sent_joins_its_thread_as_outbound(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    own = f"{mailbox.name}@mailbox.example"
    root = f"<question.{secrets.token_hex(4)}@customer.example>"
    question = raw_mail(1, subject="A question", message_id=root)
    reply = raw_mail(
        2,
        subject="Re: A question",
        sender="Support <support@elsewhere.example>",
        extra_headers=f"In-Reply-To: {root}\r\nReferences: {root}\r\n",
    )
    # Sent by the account's own address from another client, delivered to INBOX (Cc).
    note = raw_mail(
        3,
        subject="Re: A question (cc)",
        sender=f"Me <{own.upper()}>",
        extra_headers=f"References: {root}\r\n",
    )
    dovecot.deliver(mailbox, [question, note], internal_date=RECENT)
    append(dovecot, mailbox, "Sent", reply)
    account_id = connect(mail.app, admin, dovecot, mailbox)

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (3, None)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    thread_key = listed["A question"]["threadKey"]
    assert listed["Re: A question"]["threadKey"] == thread_key
    assert listed["Re: A question"]["direction"] == "outbound"
    assert listed["Re: A question"]["folders"] == ["Sent"]
    assert listed["Re: A question (cc)"]["direction"] == "outbound"  # From is the account
    assert listed["A question"]["direction"] == "inbound"
    [thread] = threads(mail.app, admin, accountId=account_id)
    assert (thread["threadKey"], thread["messageCount"]) == (thread_key, 3)
    in_thread = messages(mail.app, admin, accountId=account_id, threadKey=thread_key)
    assert {m["direction"] for m in in_thread} == {"inbound", "outbound"}
    outbound = messages(mail.app, admin, accountId=account_id, direction="outbound")
    assert sorted(m["subject"] for m in outbound) == ["Re: A question", "Re: A question (cc)"]
    inbound = messages(mail.app, admin, accountId=account_id, direction="inbound")
    assert [m["subject"] for m in inbound] == ["A question"]


def test_the_same_message_in_inbox_and_archive_is_one_message(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    raw = raw_mail(1, subject="twice")
    dovecot.deliver(mailbox, [raw], internal_date=RECENT)
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    append(dovecot, mailbox, "Archive", raw)  # archived as a copy: the same bytes

    again = mail.outcome(account_id, mail.poll())
    assert (again.ingested, again.duplicates, again.error_kind) == (0, 1, None)
    [only] = messages(mail.app, admin, accountId=account_id)
    assert only["folders"] == ["Archive", "INBOX"]  # one message in two folders
    assert count_events(mail.app, INGESTED) == 1
    assert mail.outcome(account_id, mail.poll()).duplicates == 0  # the cursor moved on


def test_a_folder_uidvalidity_reset_ingests_nothing_twice(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    append(dovecot, mailbox, "Archive", raw_mail(1, subject="a"), raw_mail(2, subject="b"))
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 2
    before = dovecot.mailbox_status(mailbox, "Archive")["uidvalidity"]
    dovecot.set_uidvalidity(mailbox, before + 1000, "Archive")
    append(dovecot, mailbox, "Archive", raw_mail(3, subject="c"))

    # Listed within the interval, so the reset is found by EXAMINE, in the same pass.
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (1, 2, None)
    assert count_events(mail.app, INGESTED) == 3
    assert mail.outcome(account_id, mail.poll()).duplicates == 0


def test_a_reset_found_by_listing_voids_only_that_folders_cursor(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(folder_list_interval=0)  # list at every poll
    append(dovecot, mailbox, "Archive", raw_mail(1, subject="a"))
    append(dovecot, mailbox, "Junk", raw_mail(2, subject="j"))
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 2
    validity = dovecot.mailbox_status(mailbox, "Archive")["uidvalidity"]
    dovecot.set_uidvalidity(mailbox, validity + 7, "Archive")

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates) == (0, 1)  # Archive again, Junk not
    assert count_events(mail.app, INGESTED) == 2


def test_a_renamed_folder_is_gone_and_new_and_its_mail_stays_one(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    # Dovecot 2.3 has no MAILBOXID: a rename is a folder gone and a folder new.
    mail = make_mail_app(folder_list_interval=0)
    append(dovecot, mailbox, "Projects", raw_mail(1, subject="plan"))
    account_id = connect(mail.app, admin, dovecot, mailbox, folders="all")
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    assert "Projects" in folder_health(mail, admin, account_id)
    with imap(dovecot, mailbox) as client:
        client.rename_folder("Projects", "Projects 2026")

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 1, None)
    health = folder_health(mail, admin, account_id)
    assert "Projects 2026" in health and "Projects" not in health
    assert count_events(mail.app, INGESTED) == 1
    names = {f["name"] for f in accounts(mail.app, admin)[account_id]["folders"]}
    assert "Projects 2026" in names and "Projects" not in names
    assert count_events(mail.app, "tidings.mail.MailFolderGone") == 1
    # The message follows by its identity: one move, never a deletion.
    [plan] = messages(mail.app, admin, accountId=account_id)
    assert (plan["folders"], plan["state"]) == (["Projects 2026"], "ok")
    assert count_events(mail.app, "tidings.mail.MessageFoldersChanged") == 1
    assert count_events(mail.app, "tidings.mail.MessageDeleted") == 0
    listed = count_events(mail.app, LISTED)
    mail.outcome(account_id, mail.poll())  # listed again (interval 0): nothing changed
    assert count_events(mail.app, LISTED) == listed


def test_racing_pollers_store_each_message_once(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    first, second = make_mail_app(), make_mail_app()
    dovecot.deliver(
        mailbox, [raw_mail(i, subject=f"in {i}") for i in range(5)], internal_date=RECENT
    )
    for folder in ("Archive", "Sent"):
        append(dovecot, mailbox, folder, *(raw_mail(i, subject=f"{folder} {i}") for i in range(5)))
    account_id = connect(first.app, admin, dovecot, mailbox)
    outcomes: list[Any] = []
    barrier = threading.Barrier(2)

    def run(app: MailApp) -> None:
        barrier.wait()
        outcomes.append(app.syncer.sync(account_id))

    runners = [threading.Thread(target=run, args=(app,)) for app in (first, second)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(timeout=120)
    assert len(outcomes) == 2
    stored = sum(o.ingested for o in outcomes if o.error_kind is None)
    assert count_events(first.app, INGESTED) == 15
    assert stored <= 15
    mail_after = mail_of(first, admin, account_id)
    assert len(mail_after) == 15 and len({m["messageId"] for m in mail_after}) == 15
    assert count_events(first.app, LISTED) == 6  # the folders recorded once
    # Both listed the new folders at once: one row each, with one key.
    folders = accounts(first.app, admin)[account_id]["health"]["folders"]
    assert sorted(f["name"] for f in folders) == sorted(
        ["INBOX", "Sent", "Archive", "Drafts", "Junk", "Trash"]
    )


def mail_of(app: MailApp, admin: User, account_id: str) -> list[dict[str, Any]]:
    return messages(app.app, admin, accountId=account_id)


def test_a_restarted_worker_goes_on_from_each_folders_cursor(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    before = make_mail_app()
    append(dovecot, mailbox, "Archive", raw_mail(1, subject="a"))
    account_id = connect(before.app, admin, dovecot, mailbox)
    assert before.outcome(account_id, before.poll()).ingested == 1
    before.app.close()

    after = make_mail_app()
    append(dovecot, mailbox, "Archive", raw_mail(2, subject="b"))
    outcome = after.outcome(account_id, after.poll())
    assert (outcome.ingested, outcome.duplicates) == (1, 0)


def test_a_rebuild_gives_the_same_folders_and_directions(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    root = "<rebuild.folders@test.example>"
    dovecot.deliver(mailbox, [raw_mail(1, subject="q", message_id=root)], internal_date=RECENT)
    append(
        dovecot, mailbox, "Sent", raw_mail(2, subject="r", extra_headers=f"References: {root}\r\n")
    )
    append(dovecot, mailbox, "Archive", raw_mail(3, subject="s"))
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 3

    def answers() -> Any:
        listed = messages(mail.app, admin, accountId=account_id)
        sent = messages(mail.app, admin, accountId=account_id, folder="Sent")
        return listed, sent, threads(mail.app, admin, accountId=account_id)

    expected = answers()
    folders_before = accounts(mail.app, admin)[account_id]["folders"]
    mail.app.projections.rebuild()
    assert answers() == expected
    assert accounts(mail.app, admin)[account_id]["folders"] == folders_before
    assert {m["direction"] for m in expected[1]} == {"outbound"}


def test_the_folders_setting_names_what_is_synced(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app()
    append(dovecot, mailbox, "Archive", raw_mail(1, subject="archived"))
    append(dovecot, mailbox, "Clients", raw_mail(2, subject="client"))
    account_id = connect(mail.app, admin, dovecot, mailbox, folders=["Clients", "Nowhere"])
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    assert set(folder_health(mail, admin, account_id)) == {"INBOX", "Clients"}

    ok(
        mail.app.write(
            "update-mail-account", {"accountId": account_id, "folders": "special"}, admin
        )
    )
    # A changed setting lists the folders again at the next poll, within the interval.
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (1, None)
    assert "Clients" not in folder_health(mail, admin, account_id)
    assert "Archive" in folder_health(mail, admin, account_id)


@pytest.mark.parametrize(
    "folders",
    [
        "everything",
        [],
        ["ok", "bad\x01name"],
        ["x" * 1025],
        [f"f{i}" for i in range(101)],
        [""],
        [7],
        {"name": "INBOX"},
    ],
)
def test_a_hostile_folders_setting_is_refused(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser, folders: Any
) -> None:
    result = mail.app.write(
        "connect-mail-account", connect_payload(dovecot, mailbox, folders=folders), admin
    )
    assert not result.is_success and result.error is not None
    assert (result.error.code, result.error.status) == ("invalid_payload", 400)


@pytest.fixture(scope="module")
def plain_dovecot() -> Iterator[DovecotServer]:
    with DovecotServer(hide_capabilities=HIDDEN, special_use=False) as server:
        yield server


def test_a_server_without_special_use_or_list_status_syncs_sent_by_name(
    mail: MailApp, admin: User, plain_dovecot: DovecotServer
) -> None:
    box = plain_dovecot.add_user("plain" + secrets.token_hex(4), secrets.token_urlsafe(9))
    root = "<plain.root@test.example>"
    plain_dovecot.deliver(box, [raw_mail(1, subject="q", message_id=root)], internal_date=RECENT)
    append(
        plain_dovecot,
        box,
        "Sent",
        raw_mail(2, subject="r", extra_headers=f"References: {root}\r\n"),
    )
    append(plain_dovecot, box, "Projects", raw_mail(3, subject="not synced"))
    account_id = connect(mail.app, admin, plain_dovecot, box)

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (2, None)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["r"]["direction"] == "outbound" and listed["r"]["folders"] == ["Sent"]
    assert listed["r"]["threadKey"] == listed["q"]["threadKey"]
    assert set(folder_health(mail, admin, account_id)) == {"INBOX", "Sent"}


def test_hostile_folder_names_on_the_server_are_left_out_and_the_rest_syncs(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app()
    append(dovecot, mailbox, "Clients", raw_mail(1, subject="client"))
    # Names IMAP's CREATE refuses, made on the server's disk: LIST shows them anyway.
    make_folder_on_disk(mailbox, "ctl\x01name")
    make_folder_on_disk(mailbox, "tab\tname")
    make_folder_on_disk(mailbox, ".".join(["d"] * (MAX_DEPTH + 20)))  # 84 levels
    account_id = connect(mail.app, admin, dovecot, mailbox, folders="all")

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (1, None)
    names = set(folder_health(mail, admin, account_id))
    assert "Clients" in names and "INBOX" in names
    assert not any(ch in name for name in names for ch in "\x01\t")
    assert not any(name.startswith("d.d") or name.startswith("d/d") for name in names)
    [message] = messages(mail.app, admin, accountId=account_id)
    assert message["folders"] == ["Clients"]


def test_read_models_made_before_folders_and_direction_gain_them(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    first = make_mail_app()
    dovecot.deliver(mailbox, [raw_mail(1, subject="old row")], internal_date=RECENT)
    account_id = connect(first.app, admin, dovecot, mailbox)
    assert first.outcome(account_id, first.poll()).ingested == 1
    first.app.projections.catch_up()
    db: Any = first.app.ctx.mail.read_model
    with db.db.transaction() as cur:  # the tables as an older version made them
        cur.execute("ALTER TABLE mail_messages DROP COLUMN folders")
        cur.execute("ALTER TABLE mail_messages DROP COLUMN direction")
        cur.execute("DROP TABLE mail_account_folders")
    first.app.close()

    second = make_mail_app()  # bootstrap adds them back; old rows read as before
    [old] = messages(second.app, admin, accountId=account_id)
    assert (old["folders"], old["direction"]) == (["INBOX"], "inbound")
    append(dovecot, mailbox, "Sent", raw_mail(2, subject="new row"))
    assert second.outcome(account_id, second.poll()).ingested == 1
    listed = by_subject(messages(second.app, admin, accountId=account_id))
    assert (listed["new row"]["folders"], listed["new row"]["direction"]) == (["Sent"], "outbound")
    # Folder events are as new as the table, so a real upgrade misses none; here the
    # table was dropped under its events, and a rebuild brings them back.
    second.app.projections.rebuild()
    assert len(accounts(second.app, admin)[account_id]["folders"]) == 6


def test_another_mailbox_starts_every_folder_afresh(
    mail: MailApp, admin: User, dovecot: DovecotServer, new_mailbox: Any
) -> None:
    first, second = new_mailbox(), new_mailbox()
    append(dovecot, first, "Archive", *(raw_mail(i, subject=f"first {i}") for i in range(3)))
    append(dovecot, second, "Archive", *(raw_mail(i, subject=f"second {i}") for i in range(2)))
    # Same UIDVALIDITY in both (Dovecot takes the clock's second): only the reset tells.
    validity = dovecot.mailbox_status(first, "Archive")["uidvalidity"]
    dovecot.set_uidvalidity(second, validity, "Archive")
    account_id = connect(mail.app, admin, dovecot, first)
    assert mail.outcome(account_id, mail.poll()).ingested == 3

    imap = {"host": dovecot.host, "port": dovecot.port, "security": "none"}
    update = {"accountId": account_id, "imap": {**imap, "username": second.name}}
    ok(mail.app.write("update-mail-account", {**update, "secret": second.password}, admin))
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (2, None)
