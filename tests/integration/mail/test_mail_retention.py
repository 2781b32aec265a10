"""Mail retention on both backends, against a private Dovecot: bodies erased past the
tenant's ``bodiesFor`` (blob destroyed, ``bodyErased``, no raw, text or attachments),
messages expired past ``messagesFor`` (``state: deleted``), the feed and a webhook in
order, a rebuild giving the same rows, a sweep killed between destroying the blobs and recording the
erasures, and two sweepers racing: each erasure and expiry recorded once."""

from __future__ import annotations

import dataclasses
import io
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from application import User
from application.app import App
from domain.message_retention import MessageBodyErased, MessageExpired
from infrastructure import bootstrap as wiring
from infrastructure.eventstore.jsonl import export_events
from infrastructure.in_process.lease import InProcessLease
from infrastructure.runtime.settings import Settings
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.integration.retention.support import MovingClock
from tests.integration.webhooks.helpers import create_webhook, deliveries, delivering, eventually
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.dump import dump_database
from tests.support.results import ok
from tests.support.webhook_receiver import Receiver

NOW = datetime.now(UTC).replace(microsecond=0)
POLICY = {"bodiesFor": "30d", "messagesFor": "60d"}


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock(NOW)


def seeded(
    mail: MailApp, admin: User, dovecot: DovecotServer, box: DovecotUser, clock: MovingClock
) -> dict[str, dict[str, Any]]:
    """Two messages (10 and 2 days old), ingested and projected; by subject."""
    ok(mail.app.write("set-mail-retention", {"mailRetention": POLICY}, admin))
    for n, subject, age in ((1, "old", 10), (2, "new", 2)):
        arrived = NOW - timedelta(days=age)  # INTERNALDATE: when the server received it
        body = f"secret-{subject}-body"
        dovecot.deliver(
            box, [raw_mail(n, subject=subject, date=arrived, body=body)], internal_date=arrived
        )
    connect(mail.app, admin, dovecot, box)
    mail.poll()
    mail.app.ctx = dataclasses.replace(mail.app.ctx, clock=clock)
    return {m["subject"]: m for m in messages(mail.app, admin)}


def sweep(app: App, lease: InProcessLease | None = None) -> int:
    app.projections.catch_up()
    settings = Settings(database_url="sqlite://", retention_batch_size=1)
    report = wiring.retention_sweeper(app, settings, lease=lease or InProcessLease(60.0)).run()
    assert report is not None
    app.projections.catch_up()
    return report.recorded


def message(app: App, admin: User, message_id: str) -> dict[str, Any]:
    found: dict[str, Any] = ok(app.query("get-message", {"messageId": message_id}, admin))
    return found


def rows(app: App) -> list[tuple[Any, ...]]:
    with app.ctx.mail.read_model.db.reading() as cur:  # type: ignore[attr-defined]
        cur.execute(
            "SELECT message_id, state, body_ref, snippet, body_erased FROM mail_messages"
            " ORDER BY message_id"
        )
        return [tuple(row) for row in cur.fetchall()]


def feed_types(app: App, admin: User) -> list[tuple[str, str]]:
    items = ok(app.query("read-feed", {"after": 0, "limit": 1000}, admin))["items"]
    return [
        (item["type"], item["data"]["messageId"])
        for item in items
        if item["type"] in ("message.body_erased", "message.expired")
    ]


def test_bodies_are_erased_then_messages_expire_and_a_rebuild_agrees(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
    database_url: str,
) -> None:
    app = mail.app
    by_subject = seeded(mail, admin, dovecot, mailbox, clock)
    old, new = by_subject["old"], by_subject["new"]
    before = message(app, admin, old["messageId"])
    assert before["raw"] and "secret-old-body" in before["text"] and not before["bodyErased"]
    blobs: Any = app.ctx.mail.blobs
    assert blobs.exists(old["bodyRef"])

    clock.move(days=19)  # the old one is 29 days old
    assert sweep(app) == 0
    clock.move(days=1)
    assert sweep(app) == 1
    erased = message(app, admin, old["messageId"])
    assert erased["bodyErased"] and erased["state"] == "ok"
    assert erased["raw"] is None and erased["text"] is None and erased["html"] is None
    assert erased["attachments"] == [] and erased["snippet"] == "" and erased["bodyRef"] is None
    assert erased["subject"] == "old"  # the envelope stays until messagesFor
    assert not blobs.exists(old["bodyRef"])
    assert "secret-new-body" in message(app, admin, new["messageId"])["text"]
    assert sweep(app) == 0  # idempotent

    clock.move(days=30)  # old: 60 days, new: 52 days
    assert sweep(app) == 2  # old expired, new's body erased
    listed = {m["messageId"]: m for m in messages(app, admin)}
    assert listed[old["messageId"]]["state"] == "deleted"
    assert listed[new["messageId"]]["bodyErased"] and listed[new["messageId"]]["state"] == "ok"
    assert feed_types(app, admin) == [
        ("message.body_erased", old["messageId"]),
        ("message.expired", old["messageId"]),
        ("message.body_erased", new["messageId"]),
    ]
    assert count_events(app, MessageBodyErased.TOPIC) == 2
    assert count_events(app, MessageExpired.TOPIC) == 1
    # Neither body is left anywhere: no blob, no table holds its text.
    assert not blobs.exists(new["bodyRef"])
    for _, text in dump_database(database_url):
        assert "secret-old-body" not in text and "secret-new-body" not in text
    for path in blobs.root.rglob("*"):
        if path.is_file():
            assert b"secret-" not in path.read_bytes()
    export = io.StringIO()
    export_events(wiring.event_store(app), export)
    assert "secret-" not in export.getvalue()

    settled = rows(app)
    app.projections.rebuild()
    assert rows(app) == settled


def test_a_sweep_killed_after_destroying_blobs_records_them_at_the_next_run(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
) -> None:
    app = mail.app
    by_subject = seeded(mail, admin, dovecot, mailbox, clock)
    blobs: Any = app.ctx.mail.blobs
    clock.move(days=40)  # both bodies due (50 and 42 days); neither message yet
    real_append = app.ctx.store.append

    def dies(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies before its append

    app.ctx.store.append = dies  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        sweep(app)
    app.ctx.store.append = real_append  # type: ignore[method-assign]
    assert count_events(app, MessageBodyErased.TOPIC) == 0
    assert sweep(app) == 2
    assert sweep(app) == 0
    assert count_events(app, MessageBodyErased.TOPIC) == 2
    for found in by_subject.values():
        assert not blobs.exists(found["bodyRef"])
        assert message(app, admin, found["messageId"])["bodyErased"]


def test_two_sweepers_racing_record_each_erasure_once(
    make_mail_app: Callable[..., MailApp],
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
) -> None:
    first = make_mail_app()
    seeded(first, admin, dovecot, mailbox, clock)
    second = make_mail_app().app
    second.ctx = dataclasses.replace(second.ctx, clock=clock)
    clock.move(days=40)  # both bodies due; neither message yet
    counts: list[int] = []

    def run(app: App) -> None:
        counts.append(sweep(app, InProcessLease(60.0)))  # a lease each: a real race

    threads = [threading.Thread(target=run, args=(a,)) for a in (first.app, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(counts) == 2
    assert count_events(first.app, MessageBodyErased.TOPIC) == 2


def test_a_webhook_receives_erasures_and_expiries_in_order(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
) -> None:
    app = mail.app
    receiver = Receiver()
    hook = create_webhook(app, admin, receiver.url, ["message.body_erased", "message.expired"])
    by_subject = seeded(mail, admin, dovecot, mailbox, clock)
    clock.move(days=50)  # old: 60 days (expired), new: 52 days (its body erased)
    with delivering(app):
        assert sweep(app) == 2
        got = receiver.wait_for(2)
        eventually(lambda: len(deliveries(app, admin, hook["webhookId"], "delivered")) == 2)
    receiver.stop()
    firsts: dict[str, dict[str, Any]] = {}
    for r in got:
        firsts.setdefault(r.item["id"], r.item)
    items = sorted(firsts.values(), key=lambda i: i["sequence"])
    assert [(i["type"], i["data"]["messageId"]) for i in items] == [
        ("message.expired", by_subject["old"]["messageId"]),
        ("message.body_erased", by_subject["new"]["messageId"]),
    ]
    assert [r.item["sequence"] for r in got] == sorted(r.item["sequence"] for r in got)


def test_a_forged_ref_to_another_tenants_blob_is_never_destroyed(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
    clock: MovingClock,
) -> None:
    app = mail.app
    victim_box, attacker_box = new_mailbox(), new_mailbox()
    dovecot.deliver(victim_box, [raw_mail(1, body="the victim's private body")])
    connect(app, admin, dovecot, victim_box)
    attacker = User(id="x", tenant_id=f"t-x{NOW.timestamp():.0f}", roles=admin.roles)
    attacker_account = connect(app, attacker, dovecot, attacker_box)
    mail.poll()
    [victim] = messages(app, admin)
    operator = User(id="op", tenant_id="system", roles=frozenset({"SystemAdmin"}))
    forged = ok(
        app.write(
            "ingest-message",
            {
                "accountId": attacker_account,
                "providerMessageId": "forged-1",
                "receivedAt": (NOW - timedelta(days=40)).isoformat(),
                "sizeBytes": 10,
                "bodyRef": victim["bodyRef"],
            },
            operator,
        )
    )
    ok(app.write("set-mail-retention", {"mailRetention": POLICY}, attacker))
    app.ctx = dataclasses.replace(app.ctx, clock=clock)
    assert sweep(app) == 1  # the forged message's "body" is erased: its own row only
    assert message(app, attacker, forged["messageId"])["bodyErased"]
    blobs: Any = app.ctx.mail.blobs
    assert blobs.exists(victim["bodyRef"])
    assert "the victim's private body" in message(app, admin, victim["messageId"])["text"]
