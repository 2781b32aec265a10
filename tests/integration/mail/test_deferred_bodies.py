"""Deferred bodies (metadata first) when the server changes under them, against the real
Dovecot on both backends, with the budget's clock injected (``test_provider_limits``):

- a deferred message expunged before its body comes is recorded ``vanished`` (its own
  feed item), the other bodies and new mail still arrive: the account never stalls; a
  webhook subscribed to the two completion types gets exactly those items;
- a UIDVALIDITY reset between deferral and body: the mailbox read again records nothing
  twice (a message whose body came before, now deferred, is recognised by its
  fingerprint twin), deferred entries move to their new place and their bodies arrive
  the day the budget allows; one expunged meanwhile is ``vanished``; a rebuild agrees;
- deleting the account or shredding its tenant forgets its deferred entries, and the
  next day's poll stores nothing for it;
- a page of another folder past the budget is stored deferred, and its bodies come from
  that folder the next day.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from application import SYSTEM_TENANT_ID, User
from application.mail.budget import utc_day
from application.mail.sync_outcome import SyncOutcome
from infrastructure.bootstrap import open_database
from infrastructure.sql.database import DatabaseUrl
from infrastructure.sql.deferred_bodies import SqlDeferredBodies
from infrastructure.sql.download_budget import SqlDownloadLedger
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.integration.mail.test_folder_sync import append
from tests.integration.mail.test_provider_limits import (
    BODY_FETCHED,
    BUDGET_BYTES,
    INGESTED,
    SIZE,
    Clock,
    clocked_syncer,
)
from tests.integration.webhooks.helpers import create_webhook, deliveries, delivering, eventually
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from tests.support.webhook_receiver import Receiver
from workers.once import poll_once

VANISHED = "tidings.mail.MessageBodyVanished"
OPERATOR = User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def budgeted(make_mail_app: MakeMailApp, dovecot: DovecotServer) -> MailApp:
    return make_mail_app(
        provider_limits={dovecot.host: {"name": "tiny", "daily_budget_mb": BUDGET_BYTES / 1e6}}
    )


def poll_on(mail: MailApp, database_url: str, when: datetime) -> SyncOutcome:
    """One poll pass of the app's accounts as ``tidings worker --once``, on ``when``'s day."""
    syncer, db = clocked_syncer(mail, database_url, Clock(when))
    try:
        [outcome] = poll_once(mail.app, syncer, concurrency=1, deadline_seconds=60.0)
    finally:
        db.close()
    return outcome


def deferred_entries(database_url: str, account_id: str) -> list[int]:
    db = open_database(DatabaseUrl.parse(database_url))
    try:
        return [entry.uid for entry in SqlDeferredBodies(db).due(account_id, 1000)]
    finally:
        db.close()


def spend(database_url: str, account_id: str, when: datetime, nbytes: int) -> None:
    db = open_database(DatabaseUrl.parse(database_url))
    try:
        SqlDownloadLedger(db).add(account_id, utc_day(when), nbytes)
    finally:
        db.close()


def bodies_match(
    mail: MailApp, admin: User, items: list[dict[str, Any]], sent: dict[str, bytes]
) -> None:
    for item in items:
        got = ok(mail.app.query("get-message", {"messageId": item["messageId"]}, admin))
        assert base64.b64decode(got["raw"]) == sent[str(item["subject"])]


def test_a_deferred_message_expunged_before_its_body_is_vanished_and_the_rest_arrive(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    mail = budgeted(make_mail_app, dovecot)
    app = mail.app
    sent = {f"budget {i}": raw_mail(i, subject=f"budget {i}", pad_to=SIZE) for i in range(10)}
    dovecot.deliver(mailbox, list(sent.values()))
    account_id = connect(app, admin, dovecot, mailbox)
    receiver = Receiver()  # a webhook for the completions only, by their types
    hook = create_webhook(
        app, admin, receiver.url, ["message.body_fetched", "message.body_vanished"]
    )
    today = datetime.now(UTC)
    first = poll_on(mail, database_url, today)
    assert (first.error_kind, first.ingested) == (None, 10)
    waiting = deferred_entries(database_url, account_id)
    assert waiting and waiting[-1] == 10  # the last UIDs wait for their bodies
    dovecot.doveadm("expunge", "-u", mailbox.name, "mailbox", "INBOX", "uid", "10")
    dovecot.deliver(mailbox, [raw_mail(99, subject="after")])

    tomorrow = today + timedelta(days=1)
    later = poll_on(mail, database_url, tomorrow)
    assert (later.error_kind, later.ingested, later.completed) == (None, 1, len(waiting))
    assert deferred_entries(database_url, account_id) == []
    listed = {m["subject"]: m for m in messages(app, admin, accountId=account_id)}
    assert len(listed) == 11
    assert listed["budget 9"]["state"] == "vanished"
    assert all(m["state"] == "ok" for s, m in listed.items() if s != "budget 9")
    kept = [m for s, m in listed.items() if s not in {"budget 9", "after"}]
    bodies_match(mail, admin, kept, sent)
    assert count_events(app, VANISHED) == 1
    assert count_events(app, BODY_FETCHED) == len(waiting) - 1
    items = ok(app.query("read-feed", {"after": 0, "limit": 100}, admin))["items"]
    [gone] = [i["data"] for i in items if i["type"] == "message.body_vanished"]
    assert gone == {
        "messageId": listed["budget 9"]["messageId"],
        "accountId": account_id,
        "state": "vanished",
        "reason": "expunged",
    }
    try:
        with delivering(app):
            got = receiver.wait_for(len(waiting))
            eventually(
                lambda: len(deliveries(app, admin, hook["webhookId"], "delivered")) == len(waiting)
            )
    finally:
        receiver.stop()
    assert sorted(r.item["type"] for r in got) == ["message.body_fetched"] * (len(waiting) - 1) + [
        "message.body_vanished"
    ]
    again = poll_on(mail, database_url, tomorrow)
    assert (again.error_kind, again.ingested, again.completed) == (None, 0, 0)
    before = messages(app, admin, accountId=account_id)
    app.projections.rebuild()
    assert messages(app, admin, accountId=account_id) == before


def test_a_uidvalidity_reset_between_deferral_and_body_records_nothing_twice(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    mail = budgeted(make_mail_app, dovecot)
    app = mail.app
    sent = {f"budget {i}": raw_mail(i, subject=f"budget {i}", pad_to=SIZE) for i in range(10)}
    dovecot.deliver(mailbox, list(sent.values()))
    account_id = connect(app, admin, dovecot, mailbox)
    today = datetime.now(UTC)
    first = poll_on(mail, database_url, today)
    assert (first.error_kind, first.ingested) == (None, 10)
    waiting = deferred_entries(database_url, account_id)
    deferred_before = len(waiting)
    assert deferred_before >= 2
    status = dovecot.mailbox_status(mailbox)
    dovecot.doveadm("expunge", "-u", mailbox.name, "mailbox", "INBOX", "uid", "10")
    dovecot.set_uidvalidity(mailbox, status["uidvalidity"] + 7)

    # The next day, half of the day's budget spent already (the watch, say), the mailbox
    # is read again: the first bodies already here are downloaded again (dedup absorbs
    # them); the others already here come deferred and are recognised (fingerprint
    # twins), not recorded again; the deferred messages come deferred again and move;
    # the expunged one is not found again: vanished.
    spend(database_url, account_id, today + timedelta(days=1), BUDGET_BYTES * 4 // 10)
    day2 = poll_on(mail, database_url, today + timedelta(days=1))
    assert (day2.error_kind, day2.ingested, day2.completed) == (None, 0, 1)
    assert count_events(app, INGESTED) == 10  # nothing recorded twice
    assert len(deferred_entries(database_url, account_id)) == deferred_before - 1

    # The day after, the budget allows: the moved entries find their messages.
    day3 = poll_on(mail, database_url, today + timedelta(days=2))
    assert (day3.error_kind, day3.ingested, day3.completed) == (None, 0, deferred_before - 1)
    assert deferred_entries(database_url, account_id) == []
    assert count_events(app, INGESTED) == 10
    assert count_events(app, BODY_FETCHED) == deferred_before - 1
    assert count_events(app, VANISHED) == 1
    listed = {m["subject"]: m for m in messages(app, admin, accountId=account_id)}
    assert sorted(listed) == sorted(sent)
    assert listed["budget 9"]["state"] == "vanished"
    kept = [m for s, m in listed.items() if s != "budget 9"]
    assert all(m["state"] == "ok" and m["snippet"] for m in kept)
    bodies_match(mail, admin, kept, sent)
    items = ok(app.query("read-feed", {"after": 0, "limit": 100}, admin))["items"]
    [gone] = [i["data"] for i in items if i["type"] == "message.body_vanished"]
    assert gone["reason"] == "uidvalidity_changed"
    before = messages(app, admin, accountId=account_id)
    app.projections.rebuild()
    assert messages(app, admin, accountId=account_id) == before


def test_a_mailbox_read_again_completes_deferred_messages_with_the_bodies_it_brings(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    mail = budgeted(make_mail_app, dovecot)
    app = mail.app
    sent = {f"budget {i}": raw_mail(i, subject=f"budget {i}", pad_to=SIZE) for i in range(10)}
    dovecot.deliver(mailbox, list(sent.values()))
    account_id = connect(app, admin, dovecot, mailbox)
    today = datetime.now(UTC)
    spend(database_url, account_id, today, BUDGET_BYTES * 7 // 10)  # room for one body
    first = poll_on(mail, database_url, today)
    assert (first.error_kind, first.ingested) == (None, 10)
    assert deferred_entries(database_url, account_id) == list(range(2, 11))
    status = dovecot.mailbox_status(mailbox)
    dovecot.set_uidvalidity(mailbox, status["uidvalidity"] + 3)

    # Read again on a fresh day: the bodies it brings complete their deferred messages
    # (the rest come deferred again, at their new place, and wait for the budget).
    day2 = poll_on(mail, database_url, today + timedelta(days=1))
    assert (day2.error_kind, day2.ingested) == (None, 0)
    completed_by_pages = day2.completed
    assert completed_by_pages >= 2
    left = deferred_entries(database_url, account_id)
    assert len(left) == 9 - completed_by_pages
    day3 = poll_on(mail, database_url, today + timedelta(days=2))
    assert (day3.error_kind, day3.ingested, day3.completed) == (None, 0, len(left))
    assert count_events(app, INGESTED) == 10
    assert count_events(app, BODY_FETCHED) == 9  # each deferred body once
    listed = messages(app, admin, accountId=account_id)
    assert all(m["state"] == "ok" and m["snippet"] for m in listed)
    bodies_match(mail, admin, listed, sent)


def test_deleting_the_account_or_shredding_its_tenant_forgets_its_deferred_bodies(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    mail = budgeted(make_mail_app, dovecot)
    app = mail.app
    today = datetime.now(UTC)
    deleted_box, shredded_box = new_mailbox(), new_mailbox()
    dovecot.deliver(deleted_box, [raw_mail(i, pad_to=SIZE) for i in range(8)])
    deleted = connect(app, admin, dovecot, deleted_box)
    assert poll_on(mail, database_url, today).ingested == 8
    assert deferred_entries(database_url, deleted)
    ok(app.write("delete-mail-account", {"accountId": deleted}, admin))
    assert deferred_entries(database_url, deleted) == []

    dovecot.deliver(shredded_box, [raw_mail(i, pad_to=SIZE) for i in range(8)])
    shredded = connect(app, admin, dovecot, shredded_box)
    assert poll_on(mail, database_url, today + timedelta(days=1)).ingested == 8
    assert deferred_entries(database_url, shredded)
    ok(app.write("shred-tenant", {"tenantId": admin.tenant_id}, OPERATOR))
    assert deferred_entries(database_url, shredded) == []
    after = poll_on(mail, database_url, today + timedelta(days=2))
    # The shredded tenant's secret is unreadable too: its account cannot even log in.
    assert (after.ingested, after.completed) == (0, 0)
    assert count_events(app, BODY_FETCHED) == 0


def test_deferred_bodies_in_another_folder_come_from_that_folder(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    # A folder page past the budget is stored like INBOX's (it used to be dropped, and
    # the folder waited): its deferred messages' bodies come from Archive the next day.
    mail = budgeted(make_mail_app, dovecot)
    sent = {f"arch {i}": raw_mail(i, subject=f"arch {i}", pad_to=SIZE) for i in range(8)}
    append(dovecot, mailbox, "Archive", *sent.values())
    account_id = connect(mail.app, admin, dovecot, mailbox)
    today = datetime.now(UTC)
    first = poll_on(mail, database_url, today)
    assert (first.error_kind, first.ingested) == (None, 8)
    waiting = deferred_entries(database_url, account_id)
    assert waiting
    listed = messages(mail.app, admin, accountId=account_id)
    assert {m["state"] for m in listed} == {"ok", "deferred"}
    assert all(m["folders"] == ["Archive"] for m in listed)

    later = poll_on(mail, database_url, today + timedelta(days=1))
    assert (later.error_kind, later.ingested, later.completed) == (None, 0, len(waiting))
    assert deferred_entries(database_url, account_id) == []
    listed = messages(mail.app, admin, accountId=account_id)
    assert {m["state"] for m in listed} == {"ok"}
    bodies_match(mail, admin, listed, sent)
    assert count_events(mail.app, BODY_FETCHED) == len(waiting)
    assert count_events(mail.app, INGESTED) == 8
