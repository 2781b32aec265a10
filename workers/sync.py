"""Syncing one account: the reconciliation poll's unit of work.

    load account (skip unless active) -> secret -> log in -> loop:
        fetch a page after the cursor (first sync: backfill window by date)
        parse each message (bounded, never raising) -> ingest the page atomically
        save the cursor (only now: a crash before re-fetches, dedup absorbs it)
    until the server has no more, or the deadline passed (-> transient failure).

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
from application.mail.ingestion import IncomingMessage, ingest
from application.mail.parsing import MimeParser, ParsedMessage
from application.mail.ports import (
    BlobOwner,
    Credentials,
    FetchedMessage,
    ImapEndpoint,
    MailboxAuthError,
    MailboxCursorInvalid,
    MailboxSession,
    MailboxThrottled,
    MailProviderError,
)
from application.privacy import KeyErased
from application.streams import commit, load
from domain.mail_account import MailAccount
from domain.message import MessageState

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
    error_kind: str | None = None
    retry_after: float | None = None
    skipped: bool = False

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class DeadlineExceeded(ApplicationError):
    pass


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
            username=reveal(self.ctx, account.imap["username"]) or "",
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
        """Fetch and ingest everything new; on ``session`` if given (a watch's own
        connection), else on a connection of its own, closed afterwards."""
        try:
            account = load(self.ctx.store, MailAccount, UUID(account_id))
        except StoreUnavailable as error:  # a watch keeps its session and tries again later
            return self._failed(account_id, "store_unavailable", error)
        if account.status != "active":
            return SyncOutcome(account_id, skipped=True)
        try:
            if session is None:
                with self.open_session(account) as opened:
                    ingested, duplicates = self._pages(opened, account, deadline, on_page)
            else:
                ingested, duplicates = self._pages(session, account, deadline, on_page)
        except MailboxAuthError as error:
            self._auth_failed(account_id, error)
            return self._failed(account_id, "auth", error)
        except MailboxThrottled as error:
            return self._failed(account_id, "throttled", error, retry_after=error.retry_after)
        except (MailProviderError, DeadlineExceeded) as error:
            return self._failed(account_id, "transient", error)
        except ConcurrencyConflict as error:
            return self._failed(account_id, "ingest_conflict", error)
        except StoreUnavailable as error:
            return self._failed(account_id, "store_unavailable", error)
        except KeyErased:
            # Deleted (its key shredded) while syncing: nothing left to do or record.
            log.info("sync.account_erased account_id=%s", account_id)
            return SyncOutcome(account_id, skipped=True)
        with contextlib.suppress(StoreUnavailable):  # health only: the mail is in
            self.ctx.mail.state.record_success(account_id, self.ctx.clock.now())
        log.info(
            "sync.ok account_id=%s ingested=%d duplicates=%d", account_id, ingested, duplicates
        )
        return SyncOutcome(account_id, ingested=ingested, duplicates=duplicates)

    def _pages(
        self,
        session: MailboxSession,
        account: MailAccount,
        deadline: float | None,
        on_page: Callable[[int], None] | None,
    ) -> tuple[int, int]:
        ports = self.ctx.mail
        account_id = str(account.id)
        cursor = ports.state.cursor(account_id)
        since = self.today() - timedelta(days=self.settings.backfill_window_days)
        ingested = duplicates = 0
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise DeadlineExceeded("the account's poll deadline passed")
            try:
                batch = session.fetch_since(
                    cursor, backfill_since=since, limit=self.settings.max_messages_per_poll
                )
            except MailboxCursorInvalid:
                log.warning("sync.uidvalidity_changed account_id=%s", account_id)
                cursor = None
                ports.state.save_cursor(account_id, None)
                continue
            incoming = self._page(account, batch.messages)
            outcomes = ingest(self.ctx, account, incoming) if incoming else []
            new = sum(not o.duplicate for o in outcomes)
            ingested += new
            duplicates += len(outcomes) - new
            if batch.new_cursor != cursor:  # e.g. a watch's catch-up that found nothing
                ports.state.save_cursor(account_id, batch.new_cursor)
            cursor = batch.new_cursor
            if on_page is not None:
                on_page(len(batch.messages))
            if not batch.has_more:
                return ingested, duplicates

    def _page(
        self, account: MailAccount, messages: Sequence[FetchedMessage]
    ) -> list[IncomingMessage]:
        """Parse the page, then store its inline bodies in one durable write (a pack)."""
        parsed = [self._parse(fetched) for fetched in messages]
        inline = [fetched.raw for fetched in messages if fetched.raw is not None]
        owner = BlobOwner(account.tenant_id, str(account.id))
        stored = iter(self.ctx.mail.blobs.put_many(inline, owner=owner) if inline else ())
        return [
            self._incoming(
                account, fetched, p, next(stored) if fetched.raw is not None else fetched.blob_ref
            )
            for fetched, p in zip(messages, parsed, strict=True)
        ]

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

    def _auth_failed(self, account_id: str, error: Exception) -> None:
        account = load(self.ctx.store, MailAccount, UUID(account_id))
        if account.auth_failed(error_kind=type(error).__name__, now=self.ctx.clock.now()):
            # On a conflict someone changed the account meanwhile; the next tick decides.
            with contextlib.suppress(ConcurrencyConflict):
                commit(self.ctx.store, account)

    def _failed(
        self, account_id: str, kind: str, error: Exception, retry_after: float | None = None
    ) -> SyncOutcome:
        log.warning(
            "sync.failed account_id=%s kind=%s error=%s", account_id, kind, type(error).__name__
        )
        with contextlib.suppress(StoreUnavailable):
            self.ctx.mail.state.record_failure(account_id, kind, self.ctx.clock.now())
        return SyncOutcome(account_id, error_kind=kind, retry_after=retry_after)
