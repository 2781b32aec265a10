"""Poll passes (``workers.once.poll_once`` with ``bootstrap.build_syncer``) against the
real Dovecot: backfill window, incremental, paging, UIDVALIDITY, concurrent pollers,
and one account's auth failure beside healthy ones."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

import pytest

from application import User
from domain.message import MessageIngested, message_id
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import (
    OLD,
    RECENT,
    accounts,
    connect,
    count_events,
    messages,
    raw_mail,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

INGESTED = "tidings.mail.MessageIngested"


def test_backfill_window_then_incremental_then_nothing(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    recent = [
        raw_mail(i, subject=f"recent {i}", pad_to=(0, 3_000, 60_000)[i % 3]) for i in range(6)
    ]
    old = [raw_mail(100 + i, subject=f"old {i}", date=OLD) for i in range(5)]
    # Old mail before, between and after the recent mail in UID order.
    dovecot.deliver(mailbox, old[:2], internal_date=OLD)
    dovecot.deliver(mailbox, recent[:3], internal_date=RECENT)
    dovecot.deliver(mailbox, old[2:4], internal_date=OLD)
    dovecot.deliver(mailbox, recent[3:], internal_date=RECENT)
    dovecot.deliver(mailbox, old[4:], internal_date=OLD)
    account_id = connect(app, admin, dovecot, mailbox)

    first = mail.outcome(account_id, mail.poll())
    assert (first.ingested, first.duplicates, first.error_kind) == (6, 0, None)
    listed = messages(app, admin, accountId=account_id)
    assert sorted(m["subject"] for m in listed) == sorted(f"recent {i}" for i in range(6))
    by_subject = {m["subject"]: m for m in listed}
    sample = by_subject["recent 1"]
    assert sample["from"] == [
        {"name": "Sender 1", "address": sample["from"][0]["address"]}
    ] and sample["from"][0]["address"].endswith("@origin.example")
    assert sample["to"] == [{"name": "Team", "address": "team@tidings-dest.example"}]
    assert sample["snippet"].startswith("Body of message 1.")
    assert sample["sizeBytes"] == len(recent[1])
    assert all(m["state"] == "ok" and m["folder"] == "INBOX" for m in listed)

    later = [raw_mail(200 + i, subject=f"later {i}") for i in range(3)]
    dovecot.deliver(mailbox, later)
    second = mail.outcome(account_id, mail.poll())
    assert (second.ingested, second.duplicates) == (3, 0)
    subjects = {m["subject"] for m in messages(app, admin, accountId=account_id)}
    assert subjects == {f"recent {i}" for i in range(6)} | {f"later {i}" for i in range(3)}

    third = mail.outcome(account_id, mail.poll())
    assert (third.ingested, third.duplicates, third.error_kind) == (0, 0, None)
    assert len(messages(app, admin, accountId=account_id)) == 9
    assert count_events(app, INGESTED) == 9
    health = accounts(app, admin)[account_id]["health"]
    assert health["messageCount"] == 9 and health["lastSyncAt"] is not None
    assert health["lastErrorKind"] is None and health["consecutiveFailures"] == 0


def test_paging_under_max_messages_per_poll(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(max_messages_per_poll=7)
    dovecot.deliver(mailbox, [raw_mail(i, subject=f"m{i}") for i in range(30)])
    account_id = connect(mail.app, admin, dovecot, mailbox)

    pages: list[int] = []
    outcome = mail.syncer.sync(account_id, on_page=pages.append)
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (30, 0, None)
    assert pages == [7, 7, 7, 7, 2]
    cursor = mail.app.ctx.mail.state.cursor(account_id)
    status = dovecot.mailbox_status(mailbox)
    assert cursor is not None
    assert (cursor.uidvalidity, cursor.last_uid) == (status["uidvalidity"], 30)
    assert len(messages(mail.app, admin)) == 30

    again = mail.outcome(account_id, mail.poll())
    assert (again.ingested, again.duplicates) == (0, 0)


def test_paging_first_sync_keeps_to_the_backfill_window(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(max_messages_per_poll=3)
    for i in range(5):  # recent and old mail interleaved in UID order
        dovecot.deliver(mailbox, [raw_mail(i, subject=f"new {i}")], internal_date=RECENT)
        dovecot.deliver(mailbox, [raw_mail(50 + i, subject=f"old {i}")], internal_date=OLD)
    account_id = connect(mail.app, admin, dovecot, mailbox)

    class Interrupted(Exception):
        pass

    def stop(_: int) -> None:
        raise Interrupted

    # A pass that stops after its first page leaves a backfill cursor behind...
    with pytest.raises(Interrupted):
        mail.syncer.sync(account_id, on_page=stop)
    cursor = mail.app.ctx.mail.state.cursor(account_id)
    assert cursor is not None and cursor.backfill_until == 10 and cursor.last_uid == 5
    # ...which the next pass finishes without taking the old mail in between.
    outcome = mail.outcome(account_id, mail.poll())
    assert outcome.ingested == 2
    cursor = mail.app.ctx.mail.state.cursor(account_id)
    assert cursor is not None and cursor.backfill_until is None and cursor.last_uid == 10
    assert sorted(m["subject"] for m in messages(mail.app, admin)) == [f"new {i}" for i in range(5)]
    assert mail.outcome(account_id, mail.poll()).ingested == 0
    assert len(messages(mail.app, admin)) == 5


def test_uidvalidity_change_resets_the_cursor_without_duplicates(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    dovecot.deliver(mailbox, [raw_mail(i) for i in range(8)])
    account_id = connect(app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 8
    before = app.ctx.mail.state.cursor(account_id)
    assert before is not None

    dovecot.set_uidvalidity(mailbox, before.uidvalidity + 777)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 8, None)
    after = app.ctx.mail.state.cursor(account_id)
    assert after is not None and after.uidvalidity == before.uidvalidity + 777
    assert after.last_uid == 8
    assert len(messages(app, admin)) == 8
    assert count_events(app, INGESTED) == 8

    dovecot.deliver(mailbox, [raw_mail(99, subject="after the reset")])
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    assert len(messages(app, admin)) == 9


def test_two_concurrent_pollers_ingest_each_message_once(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    first, second = make_mail_app(max_messages_per_poll=5), make_mail_app(max_messages_per_poll=5)
    dovecot.deliver(mailbox, [raw_mail(i) for i in range(40)])
    account_id = connect(first.app, admin, dovecot, mailbox)
    first.app.projections.catch_up()

    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def run(name: str, poller: MailApp) -> None:
        start.wait()
        try:
            results[name] = poller.poll()
        except Exception as error:  # surfaced by the assertion below
            results[name] = error

    threads = [
        threading.Thread(target=run, args=(name, poller))
        for name, poller in (("a", first), ("b", second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    outcomes = [o for r in results.values() for o in r]  # type: ignore[attr-defined]
    assert all(o.error_kind is None and o.account_id == account_id for o in outcomes), outcomes
    assert sum(o.ingested for o in outcomes) == 40
    assert count_events(first.app, INGESTED) == 40
    assert len(messages(first.app, admin)) == len(messages(second.app, admin)) == 40


def test_auth_failure_of_one_account_leaves_the_others_alone(
    mail: MailApp, admin: User, dovecot: DovecotServer, new_mailbox: Callable[[], DovecotUser]
) -> None:
    app = mail.app
    boxes = [new_mailbox() for _ in range(3)]
    for n, box in enumerate(boxes):
        dovecot.deliver(box, [raw_mail(10 * n + i) for i in range(4)])
    good = [connect(app, admin, dovecot, box) for box in boxes[:2]]
    bad = connect(app, admin, dovecot, boxes[2], secret="wrong-password")

    outcomes = mail.poll()
    assert {o.account_id: (o.ingested, o.error_kind) for o in outcomes} == {
        good[0]: (4, None),
        good[1]: (4, None),
        bad: (0, "auth"),
    }
    listed = accounts(app, admin)
    assert listed[bad]["status"] == "auth_error"
    assert listed[bad]["health"]["lastErrorKind"] == "auth"
    assert listed[bad]["health"]["consecutiveFailures"] == 1
    assert all(listed[g]["health"]["messageCount"] == 4 for g in good)
    assert len(messages(app, admin)) == 8

    # Skipped by the next passes until reconnected.
    assert bad not in {o.account_id for o in mail.poll()}
    ok(app.write("update-mail-account", {"accountId": bad, "secret": boxes[2].password}, admin))
    assert bad not in {o.account_id for o in mail.poll()}
    assert accounts(app, admin)[bad]["status"] == "auth_error"

    ok(app.write("reconnect-mail-account", {"accountId": bad}, admin))
    outcome = mail.outcome(bad, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (4, None)
    listed = accounts(app, admin)
    assert listed[bad]["status"] == "active"
    assert listed[bad]["health"]["lastErrorKind"] is None
    assert len(messages(app, admin)) == 12


def test_an_account_deleted_while_it_syncs_stops_quietly(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mail = make_mail_app(max_messages_per_poll=2)
    dovecot.deliver(mailbox, [raw_mail(i) for i in range(6)])
    account_id = connect(mail.app, admin, dovecot, mailbox)

    def delete_after_first_page(_: int) -> None:
        if mail.app.ctx.mail.secrets.get(account_id) is not None:
            ok(mail.app.write("delete-mail-account", {"accountId": account_id}, admin))

    outcome = mail.syncer.sync(account_id, on_page=delete_after_first_page)
    assert outcome.skipped and outcome.error_kind is None
    assert count_events(mail.app, INGESTED) == 2
    assert messages(mail.app, admin) == []
    assert mail.app.ctx.mail.state.cursor(account_id) is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert mail.poll() == []


def test_messages_recorded_after_their_accounts_delete_stay_out_of_the_read_models(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    # The race: a worker seals a page, the account is deleted, the page is appended.
    app = mail.app
    dovecot.deliver(mailbox, [raw_mail(i) for i in range(2)])
    account_id = connect(app, admin, dovecot, mailbox)
    mail.poll()
    [late] = [
        recorded.event
        for recorded in app.ctx.store.read(0, 100)  # type: ignore[attr-defined]
        if isinstance(recorded.event, MessageIngested)
    ][:1]
    ok(app.write("delete-mail-account", {"accountId": account_id}, admin))
    app.projections.catch_up()
    straggler = dataclasses.replace(
        late,
        originator_id=message_id(account_id, "fp:late"),
        provider_message_id="fp:late",
        thread_key="late-thread",
    )
    app.ctx.store.append([straggler])
    app.projections.catch_up()
    assert app.ctx.mail.read_model.message(str(straggler.originator_id)) is None
    app.projections.rebuild()
    assert app.ctx.mail.read_model.message(str(straggler.originator_id)) is None
    reader = app.ctx.mail.read_model
    assert reader.threads(admin.tenant_id, account_ids=None, limit=10, after=None) == []
    assert (
        reader.messages(
            admin.tenant_id, account_ids=None, thread_key=None, state=None, limit=10, after=None
        )
        == []
    )


def test_pointing_an_account_at_another_mailbox_reads_that_mailbox(
    mail: MailApp, admin: User, dovecot: DovecotServer, new_mailbox: Callable[[], DovecotUser]
) -> None:
    app = mail.app
    first, second = new_mailbox(), new_mailbox()
    dovecot.deliver(first, [raw_mail(i, subject=f"first {i}") for i in range(5)])
    dovecot.deliver(second, [raw_mail(10 + i, subject=f"second {i}") for i in range(3)])
    account_id = connect(app, admin, dovecot, first)
    assert mail.outcome(account_id, mail.poll()).ingested == 5

    imap = {"host": dovecot.host, "port": dovecot.port, "security": "none", "username": second.name}
    ok(
        app.write(
            "update-mail-account",
            {"accountId": account_id, "imap": imap, "secret": second.password},
            admin,
        )
    )
    assert mail.outcome(account_id, mail.poll()).ingested == 3
    assert {m["subject"] for m in messages(app, admin)} == {
        *(f"first {i}" for i in range(5)),
        *(f"second {i}" for i in range(3)),
    }
    # The same mailbox again (settings re-sent unchanged) keeps the cursor.
    cursor = app.ctx.mail.state.cursor(account_id)
    ok(app.write("update-mail-account", {"accountId": account_id, "imap": imap}, admin))
    assert app.ctx.mail.state.cursor(account_id) == cursor is not None
