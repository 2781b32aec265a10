"""Provider limits against the real Dovecot, configured the way an operator would: a
``provider_limits`` entry for the test server's host (127.0.0.1) with a tiny daily
budget or a small connection cap.

- A backfill that crosses 80% of the budget stops fetching bodies: every message is
  recorded at once, the rest ``deferred`` (metadata and headers, no body; a second pass
  that day fetches nothing), and after the UTC day rolls over (the budget's clock
  injected) every deferred body arrives, each exactly once, byte for byte; a rebuild
  gives the same rows. Hostile cases (``test_deferred_bodies.py``) live beside it.
- More accounts than the host's cap never hold more sockets than the cap (Dovecot's
  own count of sessions); a refused open is local throttling, and a freed slot is
  taken again.
"""

from __future__ import annotations

import base64
import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.mail.account_sync import AccountSync
from application.mail.budget import ProviderBudgets, utc_day
from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxSession,
    MailboxThrottled,
    OpenOptions,
)
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.bootstrap import imap_settings, open_database, provider_table
from infrastructure.bootstrap_workers import account_sync
from infrastructure.imap import ImapMailProvider
from infrastructure.net_policy import DestinationCheckedProvider, ResolvingDestinationPolicy
from infrastructure.runtime.settings import Settings
from infrastructure.sql.database import DatabaseUrl
from infrastructure.sql.download_budget import SqlDownloadLedger
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.caps import CappedProvider, ConnectionCaps
from workers.once import poll_once

INGESTED = "tidings.mail.MessageIngested"
BODY_FETCHED = "tidings.mail.MessageBodyFetched"
BUDGET_BYTES = 50_000  # bodies are deferred past 40,000 bytes a day
SIZE = 10_000


def header_of(raw: bytes) -> bytes:
    return raw[: raw.index(b"\r\n\r\n") + 4]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def clocked_syncer(mail: MailApp, database_url: str, clock: Clock) -> tuple[AccountSync, Any]:
    """The poll's unit of work as ``bootstrap`` wires it, with the budget's clock given."""
    app, settings = mail.app, mail.settings
    db = open_database(DatabaseUrl.parse(database_url))
    budgets = ProviderBudgets(provider_table(settings), SqlDownloadLedger(db), clock)
    imap = ImapMailProvider(
        blob_store=app.ctx.mail.blobs, settings=imap_settings(settings), budgets=budgets
    )
    destinations = ResolvingDestinationPolicy(allow_private=True)  # the test server: loopback
    provider = DestinationCheckedProvider(imap, destinations)
    ctx = replace(app.ctx, mail_ports=replace(app.ctx.mail, provider=provider))
    return account_sync(ctx, settings), db


def test_a_backfill_past_eighty_percent_records_metadata_first_and_bodies_the_next_utc_day(
    make_mail_app: MakeMailApp,
    database_url: str,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    mail = make_mail_app(
        provider_limits={dovecot.host: {"name": "tiny", "daily_budget_mb": BUDGET_BYTES / 1e6}}
    )
    app = mail.app
    sent = [raw_mail(i, subject=f"budget {i}", pad_to=SIZE) for i in range(10)]
    dovecot.deliver(mailbox, sent)
    account_id = connect(app, admin, dovecot, mailbox)
    today = datetime.now(UTC)

    # Today (bootstrap's own wiring, the system clock): bodies until 80% is spent, and
    # every other message recorded with its metadata, its body deferred.
    first = mail.outcome(account_id, mail.poll())
    assert (first.error_kind, first.ingested, first.completed) == (None, len(sent), 0)
    fits = 0  # bodies are fetched while the day's count is below 80%
    while sum(len(m) for m in sent[:fits]) < 0.8 * BUDGET_BYTES:
        fits += 1
    assert 0 < fits < len(sent)
    syncer, db = clocked_syncer(mail, database_url, Clock(today))
    try:
        ledger = SqlDownloadLedger(db)
        used = ledger.used(account_id, utc_day(today))
        headers = sum(len(header_of(raw)) for raw in sent[fits:])
        assert used == sum(len(m) for m in sent[:fits]) + headers  # bodies and headers counted
        listed = {m["subject"]: m for m in messages(app, admin, accountId=account_id)}
        assert sorted(listed) == sorted(f"budget {i}" for i in range(10))  # all listed now
        for i, raw in enumerate(sent):
            item = listed[f"budget {i}"]
            assert item["state"] == ("ok" if i < fits else "deferred")
            assert item["sizeBytes"] == len(raw)
            assert (item["snippet"] == "") == (i >= fits)  # no body, no snippet yet
            assert item["from"] and item["to"]  # the header block shows who and to whom
        deferred = messages(app, admin, accountId=account_id, state="deferred")
        assert len(deferred) == len(sent) - fits
        pending = ok(app.query("get-message", {"messageId": deferred[0]["messageId"]}, admin))
        assert pending["raw"] is None and pending["state"] == "deferred"

        # Later the same day: nothing more is downloaded, nothing is recorded twice.
        [again] = poll_once(app, syncer, concurrency=1, deadline_seconds=60.0)
        assert (again.ingested, again.completed, again.error_kind) == (0, 0, None)
        assert ledger.used(account_id, utc_day(today)) == used

        # The next UTC day: the deferred bodies arrive, each once.
        tomorrow = today + timedelta(days=1)
        syncer, db2 = clocked_syncer(mail, database_url, Clock(tomorrow))
        try:
            [later] = poll_once(app, syncer, concurrency=1, deadline_seconds=60.0)
            assert (later.ingested, later.duplicates, later.completed, later.error_kind) == (
                0,
                0,
                len(sent) - fits,
                None,
            )
            assert ledger.used(account_id, utc_day(tomorrow)) == sum(len(m) for m in sent[fits:])
            [last] = poll_once(app, syncer, concurrency=1, deadline_seconds=60.0)
            assert (last.ingested, last.duplicates, last.completed) == (0, 0, 0)
        finally:
            db2.close()
    finally:
        db.close()
    listed_now = messages(app, admin, accountId=account_id)
    assert sorted(m["subject"] for m in listed_now) == sorted(f"budget {i}" for i in range(10))
    assert all(m["state"] == "ok" and m["snippet"] for m in listed_now)
    assert count_events(app, INGESTED) == len(sent)
    assert count_events(app, BODY_FETCHED) == len(sent) - fits
    by_subject = {f"budget {i}": raw for i, raw in enumerate(sent)}
    for item in listed_now:  # every body is there, byte for byte
        got = ok(app.query("get-message", {"messageId": item["messageId"]}, admin))
        assert base64.b64decode(got["raw"]) == by_subject[item["subject"]]
    # The feed: every message received once, then each deferred body once.
    items = ok(app.query("read-feed", {"after": 0, "limit": 100}, admin))["items"]
    kinds = [(i["type"], i["data"]["state"]) for i in items if i["type"].startswith("message.")]
    assert kinds.count(("message.received", "ok")) == fits
    assert kinds.count(("message.received", "deferred")) == len(sent) - fits
    fetched = [i["data"] for i in items if i["type"] == "message.body_fetched"]
    assert sorted(d["messageId"] for d in fetched) == sorted(m["messageId"] for m in deferred)
    assert all(d["snippet"] and d["state"] == "ok" for d in fetched)
    # A rebuild reproduces the read model.
    app.projections.rebuild()
    assert messages(app, admin, accountId=account_id) == listed_now


def test_a_host_with_no_budget_is_never_deferred(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(mailbox, [raw_mail(i, pad_to=SIZE) for i in range(10)])
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 10


@pytest.mark.parametrize("cap", [1, 3])
def test_more_accounts_than_the_host_cap_never_hold_more_sockets_than_the_cap(
    dovecot: DovecotServer, cap: int, tmp_path: Path
) -> None:
    settings = Settings(provider_limits={dovecot.host: {"conn_cap": cap}}, per_host_conn_cap=50)
    boxes = [dovecot.add_user("c" + uuid.uuid4().hex[:12], "pw") for _ in range(5)]
    caps = ConnectionCaps(per_host=settings.per_host_conn_cap, providers=provider_table(settings))
    assert caps.host_cap(dovecot.host) == cap
    provider = CappedProvider(
        ImapMailProvider(
            blob_store=FilesystemBlobStore(tmp_path / "blobs"), settings=imap_settings(settings)
        ),
        caps,
    )
    held: list[MailboxSession] = []
    refused: list[MailboxThrottled] = []
    lock = threading.Lock()

    def open_(box: DovecotUser) -> None:
        endpoint = ImapEndpoint(dovecot.host, dovecot.port, "none", box.name)
        try:
            session = provider.open(
                endpoint, Credentials("password", box.password), OpenOptions(box.name)
            )
        except MailboxThrottled as error:
            with lock:
                refused.append(error)
            return
        with lock:
            held.append(session)

    threads = [threading.Thread(target=open_, args=(box,)) for box in boxes for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        names = {box.name for box in boxes}
        on_server = sum(s.connections for s in dovecot.who() if s.user in names)
        assert len(held) == cap == on_server
        assert len(refused) == 2 * len(boxes) - cap
        assert all(error.retry_after for error in refused)
        # A freed slot is taken again; the cap still holds.
        held.pop().close()
        open_(boxes[-1])
        assert len(held) == cap
        assert sum(s.connections for s in dovecot.who() if s.user in names) == cap
    finally:
        for session in held:
            session.close()
