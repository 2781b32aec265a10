"""The daily download budget in the IMAP session against the real Dovecot, with the
budget's ledger on the test's database (both backends) and its clock injected: streamed
bodies count chunk by chunk, and past the budget a page brings its messages deferred
(metadata and header block, no body; the cursor moves past them), a watch fetches no
body ahead with the new mail's metadata, and on the next UTC day ``fetch_deferred``
brings the bodies by UID, byte for byte. UIDs the server no longer has and a changed
UIDVALIDITY are answered, never raised."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from application.mail.budget import ProviderBudgets, utc_day
from application.mail.ports import Credentials, FetchedMessage, ImapEndpoint, OpenOptions
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
    return provider.open(endpoint, Credentials("password", user.password), OpenOptions("a1"))


def header_of(raw: bytes) -> bytes:
    return raw[: raw.index(b"\r\n\r\n") + 4]


def blob_bytes(blobs: FilesystemBlobStore, message: FetchedMessage) -> bytes:
    assert message.blob_ref is not None
    with blobs.open(message.blob_ref) as handle:
        return handle.read()


def test_streamed_bodies_count_by_chunk_and_are_deferred_past_the_budget(
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
    blobs = FilesystemBlobStore(tmp_path / "blobs")
    try:
        with session_with_budget(dovecot, user, ledger, clock, tmp_path, STREAMED) as session:
            first = session.fetch_since(None, backfill_since=WINDOW, limit=50)
            states = [m.state for m in first.messages]
            assert states == ["blob"] * 4 + ["deferred"] * 2  # 0, 20k, 40k, 60k before each
            assert not first.has_more
            # Every message is in the page: the cursor moves past the deferred ones too.
            assert first.new_cursor.backfill_until is None and first.new_cursor.last_uid == 6
            for message, raw in zip(first.messages[4:], sent[4:], strict=True):
                assert message.raw is None and message.blob_ref is None
                assert message.header == header_of(raw)  # what the message shows meanwhile
                assert message.ref.size == len(raw)
            used = ledger.used("a1", utc_day(clock.now))
            headers = sum(len(header_of(raw)) for raw in sent[4:])
            assert used == sum(len(m) for m in sent[:4]) + headers  # headers are counted too
            again = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=50)
            assert again.messages == () and again.new_cursor.last_uid == 6
            # Today nothing more fits: the bodies wait.
            waiting = session.fetch_deferred([5, 6], uidvalidity=first.new_cursor.uidvalidity)
            assert waiting.messages == () and waiting.gone == ()
            assert ledger.used("a1", utc_day(clock.now)) == used

            clock.now += timedelta(days=1)
            later = session.fetch_deferred([5, 6], uidvalidity=first.new_cursor.uidvalidity)
            assert [m.uid for m in later.messages] == [5, 6] and later.gone == ()
            assert all(m.state == "blob" for m in later.messages)
            session_blobs = [blob_bytes(blobs, m) for m in later.messages]
            assert session_blobs == sent[4:]  # byte for byte
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
            new = [make_message(i, subject=f"new {i}") for i in range(3)]
            dovecot.imap_append(user, new)
            news_until(session, "exists")
            session.idle_done()
            deferred = session.fetch_after_idle(first.new_cursor, backfill_since=WINDOW, limit=50)
            assert [m.state for m in deferred.messages] == ["deferred"] * 3
            assert [m.header for m in deferred.messages] == [header_of(raw) for raw in new]
            assert not deferred.has_more
            assert deferred.new_cursor.last_uid == first.new_cursor.last_uid + 3
            headers = sum(len(header_of(raw)) for raw in new)
            assert ledger.used("a1", utc_day(clock.now)) == int(0.8 * BUDGET) + headers

            clock.now += timedelta(days=1)
            uids = [m.uid for m in deferred.messages]
            later = session.fetch_deferred(uids, uidvalidity=deferred.new_cursor.uidvalidity)
            assert [m.uid for m in later.messages] == uids == [1, 2, 3]
            assert [m.raw for m in later.messages] == new  # byte for byte
            assert ledger.used("a1", utc_day(clock.now)) == sum(len(raw) for raw in new)
    finally:
        db.close()


def test_deferred_bodies_that_are_gone_or_of_another_uidvalidity_are_answered(
    dovecot: DovecotServer, user: DovecotUser, database_url: str, tmp_path: Path
) -> None:
    sent = [make_message(i) for i in range(3)]
    dovecot.deliver(user, sent)
    db = open_database(DatabaseUrl.parse(database_url))
    if isinstance(db, PostgresDatabase):
        db.ensure_schema()
    ledger = SqlDownloadLedger(db)
    ledger.setup()
    clock = Clock(datetime.now(UTC))
    try:
        with session_with_budget(dovecot, user, ledger, clock, tmp_path) as session:
            status = session.select_inbox()
            dovecot.doveadm("expunge", "-u", user.name, "mailbox", "INBOX", "uid", "2")
            # UIDs never given, gone, or out of range: answered as gone or left out.
            got = session.fetch_deferred([1, 2, 3, 77, 0, 2**40], uidvalidity=status.uidvalidity)
            assert [m.raw for m in got.messages] == [sent[0], sent[2]]
            assert got.gone == (2, 77)
            dovecot.set_uidvalidity(user, status.uidvalidity + 31)
            moved = session.fetch_deferred([1, 3], uidvalidity=status.uidvalidity)
            assert moved.messages == () and moved.gone == ()
            assert moved.uidvalidity == status.uidvalidity + 31
    finally:
        db.close()
