"""Flags beside the rest of the mail path, on SQLite and PostgreSQL against the real
Dovecot: a ``deferred`` message's flag change waits for its body (its version 2 is the
body's), then is mirrored; a webhook subscribed to ``message.flags_changed`` receives
the changes, in the account's order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from application import User
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.integration.mail.test_deferred_bodies import budgeted, deferred_entries, poll_on
from tests.integration.mail.test_flags import FLAGGED, FLAGS_CHANGED, SEEN, OtherClient
from tests.integration.mail.test_provider_limits import BODY_FETCHED, SIZE
from tests.integration.webhooks.helpers import create_webhook, delivering
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.webhook_receiver import Receiver


def test_a_deferred_messages_flags_wait_for_its_body(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    mail = budgeted(make_mail_app, dovecot)
    app = mail.app
    dovecot.deliver(mailbox, [raw_mail(i, subject=f"b{i}", pad_to=SIZE) for i in range(10)])
    account_id = connect(app, admin, dovecot, mailbox)
    today = datetime.now(UTC)
    assert poll_on(mail, database_url, today).ingested == 10
    waiting = deferred_entries(database_url, account_id)
    assert waiting and waiting[-1] == 10 and 1 not in waiting
    other = OtherClient(dovecot, mailbox)
    try:
        other.add("b0", SEEN)  # its body came: mirrored now
        other.add("b9", SEEN)  # deferred: held
    finally:
        other.close()

    assert poll_on(mail, database_url, today).error_kind is None
    listed = {m["subject"]: m for m in messages(app, admin, accountId=account_id)}
    assert (listed["b0"]["unread"], listed["b9"]["unread"]) == (False, True)
    assert listed["b9"]["state"] == "deferred"
    assert count_events(app, FLAGS_CHANGED) == 1

    tomorrow = today + timedelta(days=1)
    later = poll_on(mail, database_url, tomorrow)  # flags before bodies: still held
    assert (later.error_kind, later.completed) == (None, len(waiting))
    assert count_events(app, BODY_FETCHED) == len(waiting)  # no body lost its version 2
    assert poll_on(mail, database_url, tomorrow).error_kind is None
    listed = {m["subject"]: m for m in messages(app, admin, accountId=account_id)}
    assert (listed["b9"]["state"], listed["b9"]["unread"]) == ("ok", False)
    assert count_events(app, FLAGS_CHANGED) == 2
    before = messages(app, admin, accountId=account_id)
    app.projections.rebuild()
    assert messages(app, admin, accountId=account_id) == before


def test_a_webhook_receives_flag_changes_in_order(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    dovecot.deliver(mailbox, [raw_mail(0, subject="w0")])
    account_id = connect(app, admin, dovecot, mailbox)
    receiver = Receiver()
    create_webhook(app, admin, receiver.url, ["message.flags_changed"])
    try:
        mail.poll()
        other = OtherClient(dovecot, mailbox)
        try:
            for flags in ((SEEN,), (FLAGGED,)):
                other.add("w0", *flags)
                mail.poll()
            other.remove("w0", SEEN, FLAGGED)
            mail.poll()
        finally:
            other.close()
        with delivering(app):
            got = receiver.wait_for(3)
    finally:
        receiver.stop()
    assert [r.item["type"] for r in got] == ["message.flags_changed"] * 3
    assert [(r.item["data"]["flags"], r.item["data"]["accountId"]) for r in got] == [
        ([SEEN], account_id),
        ([FLAGGED, SEEN], account_id),
        ([], account_id),
    ]
