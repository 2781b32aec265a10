"""The daily download budget in the IMAP session against the real Dovecot, with the
budget's ledger on the test's database (both backends) and its clock injected: streamed
bodies count chunk by chunk, and a watch past the budget fetches no body ahead with the
new mail's metadata; the deferred messages come on the next UTC day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from application.mail.budget import ProviderBudgets, utc_day
from application.mail.ports import Credentials, ImapEndpoint
from application.mail.providers import ProviderLimits, ProviderTable
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.bootstrap import open_database
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from infrastructure.sql.database import DatabaseUrl, PostgresDatabase
from infrastructure.sql.download_budget import SqlDownloadLedger
from tests.integration.imap.test_idle import WINDOW, news_until
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

BUDGET = 100_000  # bodies deferred past 80,000 bytes
STREAMED = ImapAdapterSettings(
    connect_timeout=5, read_timeout=30, stream_threshold_bytes=1000, chunk_bytes=4096
)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def session_with_budget(
    dovecot: DovecotServer,
    user: DovecotUser,
    ledger: SqlDownloadLedger,
    clock: Clock,
    tmp_path: Path,
    settings: ImapAdapterSettings | None = None,
) -> ImapMailboxSession:
    table = ProviderTable([ProviderLimits("tiny", (dovecot.host,), daily_budget_bytes=BUDGET)])
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
        settings=settings or ImapAdapterSettings(connect_timeout=5, read_timeout=30),
        budgets=ProviderBudgets(table, ledger, clock),
    )
    endpoint = ImapEndpoint(dovecot.host, dovecot.port, "none", user.name)
    return provider.open(endpoint, Credentials("password", user.password), account_id="a1")


def test_streamed_bodies_count_by_chunk_and_wait_for_the_next_day(
    dovecot: DovecotServer, user: DovecotUser, database_url: str, tmp_path: Path
) -> None:
    sent = [make_message(i, body="x" * 20_000) for i in range(6)]
    dovecot.deliver(user, sent)
    db = open_database(DatabaseUrl.parse(database_url))
    if isinstance(db, PostgresDatabase):
        db.ensure_schema()  # the test's own schema, as bootstrap makes it
    ledger = SqlDownloadLedger(db)
    ledger.setup()
    clock = Clock(datetime.now(UTC))
    try:
        with session_with_budget(dovecot, user, ledger, clock, tmp_path, STREAMED) as session:
            first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
            assert all(m.state == "blob" for m in first.messages)
            assert len(first.messages) == 4  # 0, 20k, 40k, 60k spent before each: < 80k
            assert not first.has_more
            assert first.new_cursor.backfill_until is not None  # the backfill is not over
            used = ledger.used("a1", utc_day(clock.now))
            assert used == sum(len(m) for m in sent[:4])
            again = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=50)
            assert again.messages == () and again.new_cursor == first.new_cursor
            assert ledger.used("a1", utc_day(clock.now)) == used

            clock.now += timedelta(days=1)
            later = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=50)
            assert [m.uid for m in later.messages] == [5, 6]
            assert later.new_cursor.backfill_until is None and later.new_cursor.last_uid == 6
            assert ledger.used("a1", utc_day(clock.now)) == sum(len(m) for m in sent[4:])
    finally:
        db.close()


def test_a_watch_past_the_budget_fetches_no_body_ahead(
    dovecot: DovecotServer, user: DovecotUser, database_url: str, tmp_path: Path
) -> None:
    db = open_database(DatabaseUrl.parse(database_url))
    if isinstance(db, PostgresDatabase):
        db.ensure_schema()  # the test's own schema, as bootstrap makes it
    ledger = SqlDownloadLedger(db)
    ledger.setup()
    clock = Clock(datetime.now(UTC))
    try:
        with session_with_budget(dovecot, user, ledger, clock, tmp_path) as session:
            first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
            ledger.add("a1", utc_day(clock.now), int(0.8 * BUDGET))  # today's budget is spent
            session.idle_start()
            dovecot.imap_append(user, [make_message(i, subject=f"new {i}") for i in range(3)])
            news_until(session, "exists")
            session.idle_done()
            deferred = session.fetch_after_idle(first.new_cursor, backfill_since=WINDOW, limit=50)
            assert deferred.messages == () and not deferred.has_more
            assert deferred.new_cursor.last_uid == first.new_cursor.last_uid
            assert ledger.used("a1", utc_day(clock.now)) == int(0.8 * BUDGET)  # nothing spent

            clock.now += timedelta(days=1)
            later = session.fetch_since(deferred.new_cursor, backfill_since=WINDOW, limit=50)
            assert [m.uid for m in later.messages] == [1, 2, 3]
            assert all(m.state == "inline" for m in later.messages)
            assert ledger.used("a1", utc_day(clock.now)) == sum(
                len(m.raw or b"") for m in later.messages
            )
    finally:
        db.close()
