"""Syncing one account: the reconciliation poll's unit of work.

    load account (skip unless active) -> secret -> log in -> loop:
        fetch a page after the cursor (first sync: backfill window by date)
        parse each message (bounded, never raising) -> ingest the page atomically
        save the cursor (only now: a crash before re-fetches, dedup absorbs it)
    until the server has no more, or the deadline passed (-> transient failure).

The watch path pages the same way, but without waiting on the database: a page is
fetched on the watch's thread and handed to a ``GroupCommitter``, which ingests the pages
of many accounts in one append and saves their cursors in one write (``commit``).

An account deleted mid-pass (its key shredded) ends the pass quietly as skipped.

UIDVALIDITY changed -> the cursor is reset and the mailbox re-read from the backfill
window; message ids survive the change, so nothing is ingested twice.

Errors end the pass for this account only, by class: auth -> the account goes to
``auth_error`` (no retries until reconnected); throttled -> stays active, honours the
server's delay; anything transient -> the next tick tries again. Logs carry the
account id and the error class, never a secret, address or message text.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from uuid import UUID

from application.context import Context
from application.errors import ApplicationError, ConcurrencyConflict, StoreUnavailable
from application.mail.access import reveal
from application.mail.ingestion import IncomingMessage, append_new, prepare
from application.mail.parsing import MimeParser, ParsedMessage
from application.mail.ports import (
    BlobOwner,
    Credentials,
    FetchedMessage,
    ImapEndpoint,
    MailboxAuthError,
    MailboxCursor,
    MailboxCursorInvalid,
    MailboxSession,
    MailboxThrottled,
    MailProviderError,
)
from application.mail.state import ErrorKind
from application.privacy import KeyErased
from application.streams import commit, load
from domain.mail_account import MailAccount
from domain.message import MessageIngested, MessageState
from workers.committer import GroupCommitter

log = logging.getLogger("tidings.sync")


@dataclass(frozen=True)
class SyncSettings:
    backfill_window_days: int = 30
    max_messages_per_poll: int = 200
    parse_concurrency: int = 4


@dataclass(frozen=True)
class SyncOutcome:
    account_id: str
    ingested: int = 0
    duplicates: int = 0
    error_kind: ErrorKind | None = None
    retry_after: float | None = None
    skipped: bool = False
    more: bool = False  # a page was ingested and another waits (the watch path pages)
    cursor: MailboxCursor | None = None  # the watch path: the cursor its page saved

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class DeadlineExceeded(ApplicationError):
    pass


# What ends one account's sync as a failure of its own class (``failed``).
SYNC_ERRORS = (MailProviderError, DeadlineExceeded, ConcurrencyConflict, StoreUnavailable)


@dataclass(frozen=True)
class Page:
    """One page fetched and parsed: what ``commit`` stores and ingests."""

    account: MailAccount
    messages: list[tuple[FetchedMessage, ParsedMessage]]
    cursor: MailboxCursor  # saved once the page is ingested
    has_more: bool


class AccountSyncer:
    def __init__(
        self,
        ctx: Context,
        parser: MimeParser,
        settings: SyncSettings,
        today: Callable[[], date] = date.today,
    ) -> None:
        self.ctx = ctx
        self.parser = parser
        self.settings = settings
        self.today = today
        self._parse_slots = threading.BoundedSemaphore(settings.parse_concurrency)

    def open_session(self, account: MailAccount) -> MailboxSession:
        """Log in to the account's mailbox (raises ``MailProviderError``)."""
        account_id = str(account.id)
        secret = self.ctx.mail.secrets.get(account_id)
        if secret is None:
            raise MailboxAuthError("no usable secret for the account")
        endpoint = ImapEndpoint(
            host=account.imap["host"],
            port=int(account.imap["port"]),
            security=account.imap["security"],
            username=reveal(self.ctx, account.imap["username"], account.tenant_id, account_id)
            or "",
        )
        return self.ctx.mail.provider.open(
            endpoint,
            Credentials(account.auth_method, secret),
            account_id=account_id,
            blob_owner=BlobOwner(account.tenant_id, account_id),
        )

    def sync(
        self,
        account_id: str,
        deadline: float | None = None,
        on_page: Callable[[int], None] | None = None,
        session: MailboxSession | None = None,
    ) -> SyncOutcome:
        """Fetch and ingest everything new, page by page; on ``session`` if given (a
        watch's own connection), else on a connection of its own, closed afterwards."""
        try:
            account = load(self.ctx.store, MailAccount, UUID(account_id))
        except StoreUnavailable as error:  # a watch keeps its session and tries again later
            return self.failed(account_id, error)
        if account.status != "active":
            return SyncOutcome(account_id, skipped=True)
        try:
            if session is None:
                with self.open_session(account) as opened:
                    ingested, duplicates = self._pages(opened, account, deadline, on_page)
            else:
                ingested, duplicates = self._pages(session, account, deadline, on_page)
        except SYNC_ERRORS as error:
            return self.failed(account_id, error)
        except (KeyErased, _Erased):
            log.info("sync.account_erased account_id=%s", account_id)
            return SyncOutcome(account_id, skipped=True)
        log.info(
            "sync.ok account_id=%s ingested=%d duplicates=%d", account_id, ingested, duplicates
        )
        return SyncOutcome(account_id, ingested=ingested, duplicates=duplicates)

    def sync_page(
        self,
        account: MailAccount,
        session: MailboxSession,
        cursor: MailboxCursor | None,
        committer: GroupCommitter[Page, SyncOutcome],
        done: Callable[[SyncOutcome], None],
    ) -> None:
        """The watch path: fetch one page after ``cursor`` (the watch's own, None: read it)
        on this thread; ``committer`` ingests it together with other accounts' pages and
        calls ``done`` (``more`` when another page waits)."""
        account_id = str(account.id)
        try:
            if cursor is None:
                cursor = self.ctx.mail.state.cursor(account_id)
            page = self.fetch_page(session, account, cursor, reuse_status=True)
        except SYNC_ERRORS as error:
            done(self.failed(account_id, error))
            return
        except KeyErased:
            done(SyncOutcome(account_id, skipped=True))
            return
        committer.submit(page, done)

    def commit_group(self, pages: Sequence[Page]) -> list[SyncOutcome]:
        """``commit`` for a ``GroupCommitter``: every page gets its outcome, never raises."""
        try:
            results = self.commit(pages)
        except SYNC_ERRORS as error:
            return [self.failed(str(page.account.id), error) for page in pages]
        outcomes = []
        for page, result in zip(pages, results, strict=True):
            account_id = str(page.account.id)
            if result is None:
                outcomes.append(SyncOutcome(account_id, skipped=True))
                continue
            ingested, duplicates = result
            if ingested:
                log.info("sync.ok account_id=%s ingested=%d", account_id, ingested)
            outcomes.append(
                SyncOutcome(
                    account_id, ingested, duplicates, more=page.has_more, cursor=page.cursor
                )
            )
        return outcomes

    def _pages(
        self,
        session: MailboxSession,
        account: MailAccount,
        deadline: float | None,
        on_page: Callable[[int], None] | None,
    ) -> tuple[int, int]:
        cursor = self.ctx.mail.state.cursor(str(account.id))
        ingested = duplicates = 0
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineExceeded("the account's poll deadline passed")
            page = self.fetch_page(session, account, cursor)
            [result] = self.commit([page])
            if result is None:
                raise _Erased
            ingested, duplicates = ingested + result[0], duplicates + result[1]
            cursor = page.cursor
            if on_page is not None:
                on_page(len(page.messages))
            if not page.has_more:
                return ingested, duplicates

    def fetch_page(
        self,
        session: MailboxSession,
        account: MailAccount,
        cursor: MailboxCursor | None,
        *,
        reuse_status: bool = False,
    ) -> Page:
        """The next page after ``cursor``: fetched and parsed."""
        since = self.today() - timedelta(days=self.settings.backfill_window_days)
        limit = self.settings.max_messages_per_poll
        try:
            batch = session.fetch_since(
                cursor, backfill_since=since, limit=limit, reuse_status=reuse_status
            )
        except MailboxCursorInvalid:
            log.warning("sync.uidvalidity_changed account_id=%s", account.id)
            self.ctx.mail.state.save_cursor(str(account.id), None)
            batch = session.fetch_since(None, backfill_since=since, limit=limit)
        parsed = [(fetched, self._parse(fetched)) for fetched in batch.messages]
        return Page(account, parsed, batch.new_cursor, batch.has_more)

    def commit(self, pages: Sequence[Page]) -> list[tuple[int, int] | None]:
        """Store the pages' inline bodies (of any accounts) as one pack, ingest their
        messages in one append, then save their cursors and mark their accounts synced
        in one write — each step only after the one before is durable. Per page:
        (ingested, duplicates), or None when its account was deleted (its key shredded)
        meanwhile."""
        now = self.ctx.clock.now()
        bodies = [
            (BlobOwner(page.account.tenant_id, str(page.account.id)), fetched.raw)
            for page in pages
            for fetched, _ in page.messages
            if fetched.raw is not None
        ]
        stored_bodies = self.ctx.mail.blobs.put_packed(bodies) if bodies else []
        erased = {
            o.account_id for (o, _), ref in zip(bodies, stored_bodies, strict=True) if not ref
        }
        refs = iter(stored_bodies)
        prepared: list[list[MessageIngested] | None] = []
        for page in pages:
            body_refs = [
                next(refs) if fetched.raw is not None else fetched.blob_ref
                for fetched, _ in page.messages
            ]
            try:
                if str(page.account.id) in erased:
                    raise KeyErased(str(page.account.id))
                incoming = [
                    self._incoming(page.account, fetched, parsed, ref)
                    for (fetched, parsed), ref in zip(page.messages, body_refs, strict=True)
                ]
                prepared.append(prepare(self.ctx, page.account, incoming, now))
            except KeyErased:
                log.info("sync.account_erased account_id=%s", page.account.id)
                prepared.append(None)
        stored = append_new(self.ctx, [e for events in prepared if events for e in events])
        self.ctx.mail.state.record_synced(
            {
                str(page.account.id): page.cursor
                for page, events in zip(pages, prepared, strict=True)
                if events is not None
            },
            now,
        )
        results: list[tuple[int, int] | None] = []
        for events in prepared:
            if events is None:
                results.append(None)
                continue
            new = sum(e.originator_id in stored for e in events)
            results.append((new, len(events) - new))
        return results

    def _parse(self, fetched: FetchedMessage) -> ParsedMessage:
        with self._parse_slots:
            if fetched.raw is not None:
                return self.parser.parse_bytes(fetched.raw)
            if fetched.blob_ref is not None:
                return self.parser.parse_blob(fetched.blob_ref)
        return ParsedMessage()

    def _incoming(
        self,
        account: MailAccount,
        fetched: FetchedMessage,
        parsed: ParsedMessage,
        body_ref: str | None,
    ) -> IncomingMessage:
        state: MessageState = "ok"
        if fetched.state == "too_large":
            state = "too_large"
        elif account.trusted_authserv_id and self.parser.dmarc_failed(
            parsed, account.trusted_authserv_id
        ):
            state = "rejected"
        elif parsed.malformed:
            state = "malformed"
        ref = fetched.ref
        received = ref.internal_date or parsed.date or self.ctx.clock.now()
        return IncomingMessage(
            provider_message_id=ref.provider_message_id,
            received_at=received,
            size_bytes=ref.size,
            state=state,
            message_id_header=parsed.message_id,
            references=parsed.references or ((parsed.in_reply_to,) if parsed.in_reply_to else ()),
            sender=parsed.sender,
            to=parsed.to,
            cc=parsed.cc,
            subject=parsed.subject,
            snippet=parsed.snippet,
            body_ref=body_ref,
            defects=parsed.defects,
        )

    def failed(self, account_id: str, error: Exception) -> SyncOutcome:
        """The outcome of a sync that raised ``error`` (one of ``SYNC_ERRORS``), by class:
        auth -> the account goes to ``auth_error``; throttled -> the server's delay."""
        kind, retry_after = _error_kind(error), None
        if isinstance(error, MailboxAuthError):
            self._auth_failed(account_id, error)
        elif isinstance(error, MailboxThrottled):
            retry_after = error.retry_after
        log.warning(
            "sync.failed account_id=%s kind=%s error=%s", account_id, kind, type(error).__name__
        )
        if kind != "store_unavailable":  # that one cannot be recorded: the store is away
            with contextlib.suppress(StoreUnavailable):
                self.ctx.mail.state.record_failure(account_id, kind, self.ctx.clock.now())
        return SyncOutcome(account_id, error_kind=kind, retry_after=retry_after)

    def _auth_failed(self, account_id: str, error: Exception) -> None:
        with contextlib.suppress(StoreUnavailable):
            account = load(self.ctx.store, MailAccount, UUID(account_id))
            if account.auth_failed(error_kind=type(error).__name__, now=self.ctx.clock.now()):
                # On a conflict someone changed the account meanwhile; the next tick decides.
                with contextlib.suppress(ConcurrencyConflict):
                    commit(self.ctx.store, account)


class _Erased(Exception):
    """The account was deleted (its key shredded) mid-sync: nothing left to do or record."""


def _error_kind(error: Exception) -> ErrorKind:
    if isinstance(error, MailboxAuthError):
        return ErrorKind.AUTH
    if isinstance(error, MailboxThrottled):
        return ErrorKind.THROTTLED
    if isinstance(error, ConcurrencyConflict):
        return ErrorKind.INGEST_CONFLICT
    if isinstance(error, StoreUnavailable):
        return ErrorKind.STORE_UNAVAILABLE
    return ErrorKind.TRANSIENT  # MailProviderError, DeadlineExceeded
