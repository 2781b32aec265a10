"""Hostile messages from a real Dovecot, on both backends: a message that cannot be read
as it claims is recorded ``malformed`` with what could be read, the cursor moves past
it and the account's next messages are ingested; in the watch path's group commit a
page that cannot be stored fails alone."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta, timezone

from application import User
from application.mail.ingestion import Page
from application.mail.sync_outcome import SyncOutcome
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import RECENT, accounts, connect, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from workers.metrics import WorkerMetrics
from workers.news import News
from workers.watch_ingest import WatchIngest, watch_committer

HEAD = (
    b"Message-ID: <hostile.{n}@test.example>\r\n"
    b"From: Mallory <mallory@origin.example>\r\n"
    b"To: team@tidings-dest.example\r\n"
    b"MIME-Version: 1.0\r\n"
)
DATE = b"Date: Tue, 02 Jan 2024 10:30:00 +0000\r\n"

HOSTILE = {
    # a body and an encoded word in a codec that is not a charset: \ud800 would decode
    # to a lone surrogate, which no event can hold
    "unicode-escape": DATE
    + b"Subject: =?unicode-escape?q?=5Cud800 escape?=\r\n"
    + b"Content-Type: text/plain; charset=unicode-escape\r\n\r\n\\ud800 body\r\n",
    # a real charset that decodes to a lone surrogate (UTF-7 "+2D0-")
    "utf-7": DATE
    + b"Subject: =?utf-7?q?+2D0-?= seven\r\n"
    + b"Content-Type: text/plain; charset=utf-7\r\n\r\nbefore +2D0- after\r\n",
    # header bytes that are no charset at all, and an encoded word that is not base64
    "undecodable": DATE
    + b"Subject: \xff\xfe\xed\xa0\x80 =?utf-8?b?#$%^?= raw\r\n"
    + b"Content-Type: text/plain; charset=utf-8\r\n\r\nbody\r\n",
    # a date no clock can show: year 9999 with an offset of -23:59
    "impossible-date": b"Date: Fri, 31 Dec 9999 23:59:59 -2359\r\n"
    + b"Subject: from the far future\r\n"
    + b"Content-Type: text/plain; charset=utf-8\r\n\r\nbody\r\n",
}


def hostile(n: int, name: str) -> bytes:
    return HEAD.replace(b"{n}", str(n).encode()) + HOSTILE[name]


def storable(item: dict[str, object]) -> None:
    json.dumps(item, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert "\x00" not in json.dumps(item)


def test_hostile_messages_are_recorded_malformed_and_the_next_one_is_ingested(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    bad = [hostile(n, name) for n, name in enumerate(HOSTILE)]
    dovecot.deliver(mailbox, bad, internal_date=RECENT)
    dovecot.deliver(mailbox, [raw_mail(1, subject="after the poison")], internal_date=RECENT)
    account_id = connect(app, admin, dovecot, mailbox)

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (len(HOSTILE) + 1, None)
    listed = messages(app, admin, accountId=account_id)
    for item in listed:
        storable(item)
    malformed = messages(app, admin, accountId=account_id, state="malformed")
    assert len(malformed) == len(HOSTILE)
    assert all(
        m["from"] == [{"name": "Mallory", "address": "mallory@origin.example"}] for m in malformed
    )
    subjects = {m["subject"] for m in malformed}
    assert "\\ud800 escape" in subjects and "from the far future" in subjects
    assert "\ufffd seven" in subjects
    [good] = [m for m in listed if m["state"] == "ok"]
    assert good["subject"] == "after the poison"
    # the impossible Date is ignored: the message is dated by its INTERNALDATE
    [future] = [m for m in malformed if m["subject"] == "from the far future"]
    assert future["receivedAt"] == RECENT.strftime("%Y-%m-%dT%H:%M:%SZ")

    health = accounts(app, admin)[account_id]["health"]
    assert health["lastErrorKind"] is None and health["messageCount"] == len(HOSTILE) + 1
    again = mail.outcome(account_id, mail.poll())  # the cursor moved past them all
    assert (again.ingested, again.duplicates, again.error_kind) == (0, 0, None)
    dovecot.deliver(mailbox, [raw_mail(2, subject="later")])
    later = mail.outcome(account_id, mail.poll())
    assert (later.ingested, later.error_kind) == (1, None)


def _page(mail: MailApp, account_id: str) -> Page:
    account = mail.syncer.syncable(account_id)
    assert account is not None
    with mail.syncer.open_session(account) as session:
        return mail.syncer.fetch_page(session, account, None)


def test_one_bad_page_in_a_group_commit_fails_alone(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    boxes = [new_mailbox() for _ in range(3)]
    ids = []
    for n, box in enumerate(boxes):
        dovecot.deliver(box, [raw_mail(10 * n + i, subject=f"box {n} mail {i}") for i in range(3)])
        ids.append(connect(app, admin, dovecot, box))
    pages = [_page(mail, account_id) for account_id in ids]
    assert all(len(page.messages) == 3 for page in pages)
    # the middle account's server reported a UIDVALIDITY no cursor column can hold
    bad = dataclasses.replace(
        pages[1], cursor=dataclasses.replace(pages[1].cursor, uidvalidity=2**63)
    )
    # and a message of the first claims a size and an INTERNALDATE out of every range
    fetched, parsed = pages[0].messages[0]
    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))
    odd = dataclasses.replace(
        fetched, ref=dataclasses.replace(fetched.ref, size=2**63, internal_date=far)
    )
    first = dataclasses.replace(pages[0], messages=[(odd, parsed), *pages[0].messages[1:]])

    outcomes = mail.syncer.store_pages([first, bad, pages[2]])

    assert [o.account_id for o in outcomes] == ids
    assert [(o.ingested, o.error_kind) for o in outcomes] == [
        (3, None),
        (0, "ingest_failed"),
        (3, None),
    ]
    state = app.ctx.mail.state
    assert state.cursor(ids[0]) == first.cursor and state.cursor(ids[2]) == pages[2].cursor
    assert state.cursor(ids[1]) is None
    health = accounts(app, admin)
    assert [health[i]["health"]["lastErrorKind"] for i in ids] == [None, "ingest_failed", None]
    assert health[ids[1]]["health"]["consecutiveFailures"] == 1
    assert len(messages(app, admin, accountId=ids[1])) == 0
    assert len(messages(app, admin, accountId=ids[2])) == 3
    [recorded] = messages(app, admin, accountId=ids[0], state="malformed")
    assert recorded["sizeBytes"] == len(odd.raw or b"") and recorded["subject"] == "box 0 mail 0"
    assert datetime.fromisoformat(recorded["receivedAt"]).year < 9999
    assert len(messages(app, admin, accountId=ids[0], state="ok")) == 2
    now = datetime.now(UTC)
    assert all(datetime.fromisoformat(m["receivedAt"]) <= now for m in messages(app, admin))


def test_the_watch_path_records_poison_malformed_beside_other_accounts_pages(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    boxes = [new_mailbox() for _ in range(3)]
    dovecot.deliver(boxes[0], [hostile(n, name) for n, name in enumerate(HOSTILE)])
    dovecot.deliver(boxes[0], [raw_mail(1, subject="after the poison")])
    for n, box in enumerate(boxes[1:], start=1):
        dovecot.deliver(box, [raw_mail(10 * n + i, subject=f"box {n} mail {i}") for i in range(2)])
    ids = [connect(app, admin, dovecot, box) for box in boxes]
    told: list[News] = []
    ingest = WatchIngest(mail.syncer, watch_committer(mail.syncer), WorkerMetrics(), told.append)
    sessions = []
    answers: list[Future[SyncOutcome]] = []
    try:
        for account_id in ids:
            session = ingest.open_session(account_id)
            sessions.append(session)
            answers.append(ingest.sync(account_id, session))
        done = {a.result(60).account_id: a.result() for a in answers}
    finally:
        ingest.close()
        for session in sessions:
            session.close()

    assert [(done[i].ingested, done[i].error_kind) for i in ids] == [
        (len(HOSTILE) + 1, None),
        (2, None),
        (2, None),
    ]
    assert len(messages(app, admin, accountId=ids[0], state="malformed")) == len(HOSTILE)
    [good] = messages(app, admin, accountId=ids[0], state="ok")
    assert good["subject"] == "after the poison"
    assert app.ctx.mail.state.cursor(ids[0]) == done[ids[0]].cursor
    assert all(len(messages(app, admin, accountId=i)) == 2 for i in ids[1:])
