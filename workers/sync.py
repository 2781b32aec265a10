"""Syncing one account: the reconciliation poll's unit of work (paging and sessions; the
storing is the application service ``application.mail.ingestion.MailIngestion``).

    load account (skip unless active) -> secret -> log in -> loop:
        fetch a page after the cursor (first sync: backfill window by date)
        parse it and store it (``MailIngestion``: bodies, events, cursor, in that order)
    until the server has no more, or the deadline passed (-> transient failure)
    -> deferred messages' bodies, while the download budget allows
       (``application.mail.completion``: metadata first, the body another day).

The watch path pages the same way, but without waiting on the database: a page is
fetched on the watch's thread and handed to a ``GroupCommitter``, which stores the pages
of many accounts together (``commit_group``); a page that cannot be stored fails alone.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from uuid import UUID

from application import worker_defaults as defaults
from application.context import Context
from application.destinations import HostNotAllowed
from application.errors import ApplicationError, ConcurrencyConflict, StoreUnavailable
from application.mail.access import reveal
from application.mail.completion import BodyCompletion
from application.mail.incoming import PageRefused
from application.mail.ingestion import MailIngestion, Page
from application.mail.parsing import MimeParser
from application.mail.ports import (
    BlobOwner,
    Credentials,
    ImapEndpoint,
    MailboxAuthError,
    MailboxCursor,
    MailboxCursorInvalid,
    MailboxReauthRequired,
    MailboxSession,
    MailboxThrottled,
    MailboxTimeout,
    MailProviderError,
)
from application.mail.state import ErrorKind
from application.privacy import KeyErased
from application.streams import commit, load
from domain.mail_account import MailAccount
from workers.committer import GroupCommitter

log = logging.getLogger("tidings.sync")


@dataclass(frozen=True)
class SyncSettings:
    backfill_window_days: int = defaults.BACKFILL_WINDOW_DAYS
    max_messages_per_poll: int = defaults.MAX_MESSAGES_PER_POLL
    parse_concurrency: int = defaults.PARSE_CONCURRENCY


@dataclass(frozen=True)
class SyncOutcome:
    account_id: str
    ingested: int = 0
    duplicates: int = 0
    error_kind: ErrorKind | None = None
    retry_after: float | None = None
    skipped: bool = False
    has_more: bool = False  # a page was ingested and another waits (the watch path pages)
    completed: int = 0  # deferred messages whose bodies came (or that vanished)
    cursor: MailboxCursor | None = None  # the watch path: the cursor its page saved

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class DeadlineExceeded(ApplicationError):
    pass


# What ends one account's sync as a failure of its own class (``failed``).
SYNC_ERRORS = (
    MailProviderError,
    DeadlineExceeded,
    ConcurrencyConflict,
    StoreUnavailable,
    PageRefused,
)


class AccountSyncer:
    def __init__(
        self,
        ctx: Context,
        parser: MimeParser,
        settings: SyncSettings,
        today: Callable[[], date] = date.today,
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.today = today
        self.ingestion = MailIngestion(ctx, parser, parse_concurrency=settings.parse_concurrency)
        self.completion = BodyCompletion(ctx, self.ingestion.read_bodies)

    def open_session(self, account: MailAccount, deadline: float | None = None) -> MailboxSession:
        """Log in to the account's mailbox (raises ``MailProviderError``); ``deadline``
        bounds everything the session does."""
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
            deadline=deadline,
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
                with self.open_session(account, deadline) as opened:
                    ingested, duplicates, found = self._pages(opened, account, deadline, on_page)
                    completed = found + self._bodies(opened, account, deadline)
            else:
                ingested, duplicates, found = self._pages(session, account, deadline, on_page)
                completed = found + self._bodies(session, account, deadline)
        except SYNC_ERRORS as error:
            return self.failed(account_id, error)
        except (KeyErased, _Erased):
            log.info("sync.account_erased account_id=%s", account_id)
            return SyncOutcome(account_id, skipped=True)
        log.info(
            "sync.ok account_id=%s ingested=%d duplicates=%d completed=%d",
            account_id,
            ingested,
            duplicates,
            completed,
        )
        return SyncOutcome(
            account_id, ingested=ingested, duplicates=duplicates, completed=completed
        )

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
        calls ``done`` (``has_more`` when another page waits)."""
        account_id = str(account.id)
        try:
            if cursor is None:
                cursor = self.ctx.mail.state.cursor(account_id)
            page = self.fetch_page(session, account, cursor, after_idle=True)
        except SYNC_ERRORS as error:
            done(self.failed(account_id, error))
            return
        except KeyErased:
            done(SyncOutcome(account_id, skipped=True))
            return
        committer.submit(page, done)

    def commit_group(self, pages: Sequence[Page]) -> list[SyncOutcome]:
        """``store`` for a ``GroupCommitter``: every page gets its outcome, never raises; a
        page that cannot be stored fails alone (its account records the failure)."""
        outcomes = []
        for page, result in zip(pages, self.ingestion.store_apart(pages), strict=True):
            account_id = str(page.account.id)
            if isinstance(result, KeyErased):  # the account was deleted meanwhile
                outcomes.append(SyncOutcome(account_id, skipped=True))
            elif isinstance(result, Exception):
                if not isinstance(result, SYNC_ERRORS):  # a bug of ours: keep its traceback
                    log.error("sync.page_failed account_id=%s", account_id, exc_info=result)
                outcomes.append(self.failed(account_id, result))
            elif result.erased:
                outcomes.append(SyncOutcome(account_id, skipped=True))
            else:
                if result.ingested:
                    log.info("sync.ok account_id=%s ingested=%d", account_id, result.ingested)
                outcomes.append(
                    SyncOutcome(
                        account_id,
                        result.ingested,
                        result.duplicates,
                        has_more=page.has_more,
                        completed=result.completed,
                        cursor=page.cursor,
                    )
                )
        return outcomes

    def _pages(
        self,
        session: MailboxSession,
        account: MailAccount,
        deadline: float | None,
        on_page: Callable[[int], None] | None,
    ) -> tuple[int, int, int]:
        """Pages until the server has no more: (ingested, duplicates, deferred messages
        that came again with their bodies)."""
        cursor = self.ctx.mail.state.cursor(str(account.id))
        ingested = duplicates = completed = 0
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineExceeded("the account's poll deadline passed")
            page = self.fetch_page(session, account, cursor)
            [result] = self.ingestion.store([page])
            if result.erased:
                raise _Erased
            ingested, duplicates = ingested + result.ingested, duplicates + result.duplicates
            completed += result.completed
            cursor = page.cursor
            if on_page is not None:
                on_page(len(page.messages))
            if not page.has_more:
                return ingested, duplicates, completed

    def _bodies(self, session: MailboxSession, account: MailAccount, deadline: float | None) -> int:
        """The deferred messages' bodies the budget allows now."""

        def on_time() -> None:
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineExceeded("the account's poll deadline passed")

        limit = self.settings.max_messages_per_poll
        return self.completion.run(session, account, limit, on_time)

    def fetch_page(
        self,
        session: MailboxSession,
        account: MailAccount,
        cursor: MailboxCursor | None,
        *,
        after_idle: bool = False,
    ) -> Page:
        """The next page after ``cursor``: fetched and parsed."""
        since = self.today() - timedelta(days=self.settings.backfill_window_days)
        limit = self.settings.max_messages_per_poll
        try:
            fetch = session.fetch_after_idle if after_idle else session.fetch_since
            batch = fetch(cursor, backfill_since=since, limit=limit)
        except MailboxCursorInvalid:
            log.warning("sync.uidvalidity_changed account_id=%s", account.id)
            self.ctx.mail.state.save_cursor(str(account.id), None)
            batch = session.fetch_since(None, backfill_since=since, limit=limit)
        return self.ingestion.read_page(account, batch)

    def failed(self, account_id: str, error: Exception) -> SyncOutcome:
        """The outcome of a sync that raised ``error`` (one of ``SYNC_ERRORS``), by class:
        auth -> the account goes to ``auth_error`` (``reauth_required`` for a refused
        OAuth2 grant); throttled -> the server's delay."""
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
        """``auth_error``; ``reauth_required`` when the token server refused the grant."""
        with contextlib.suppress(StoreUnavailable):
            account = load(self.ctx.store, MailAccount, UUID(account_id))
            mark = (
                account.reauth_required
                if isinstance(error, MailboxReauthRequired)
                else account.auth_failed
            )
            if mark(error_kind=type(error).__name__, now=self.ctx.clock.now()):
                # On a conflict someone changed the account meanwhile; the next tick decides.
                with contextlib.suppress(ConcurrencyConflict):
                    commit(self.ctx.store, account)


class _Erased(Exception):
    """The account was deleted (its key shredded) mid-sync: nothing left to do or record."""


def _error_kind(error: Exception) -> ErrorKind:  # noqa: PLR0911
    if isinstance(error, MailboxAuthError):
        return ErrorKind.AUTH
    if isinstance(error, MailboxThrottled):
        return ErrorKind.THROTTLED
    if isinstance(error, ConcurrencyConflict):
        return ErrorKind.INGEST_CONFLICT
    if isinstance(error, StoreUnavailable):
        return ErrorKind.STORE_UNAVAILABLE
    if isinstance(error, MailboxTimeout | DeadlineExceeded):
        return ErrorKind.TIMEOUT
    if isinstance(error, HostNotAllowed):
        return ErrorKind.HOST_NOT_ALLOWED
    if isinstance(error, MailProviderError):
        return ErrorKind.TRANSIENT
    return ErrorKind.INGEST_FAILED  # PageRefused, or a page that could not be stored
