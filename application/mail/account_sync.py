"""One account's sync: the application service the workers' threads call (they keep
the threads, the deadlines and the pools; storing is ``MailIngestion``'s).

The account is loaded once per poll, or once per watch (``syncable``): its status is the
syncable check, its settings what a session is opened and a page ingested with. Only
the auth transition, a command, loads it afresh to commit on its current version.

The poll (``sync``), on a connection of its own:

    load the account (skip unless active) -> secret -> log in
    -> every folder's counters in one LIST-STATUS round trip where offered
       (``folder_seen.PollPlan``: what is unchanged since the last complete poll is not
       opened at all) -> unless INBOX is unchanged, loop:
        fetch a page after the cursor (first sync: backfill window by date)
        parse it and store it (``MailIngestion``: bodies, events, cursor, in that order)
    until the server has no more, or the deadline passed (-> ``DeadlineExceeded``)
    -> INBOX's flag changes (``flag_mirror.FlagMirror``: CONDSTORE, or the window)
    -> the other synced folders, each after its own cursor (``folder_sync.FolderSync``)
    -> the other synced folders' flag changes (``FlagMirror`` with the folder)
    -> where each message is now, over every synced folder: moves, copies, expunges,
       deletions (``membership.MembershipPass``; only after every folder was paged)
    -> deferred messages' bodies, while the download budget allows
       (``application.mail.completion``: metadata first, the body another day)
    -> the counters of each folder whose every step completed, saved for the next poll.

The watch path, on the watch's own session: ``next_page`` fetches one page on the
watch's thread, touching the database only for the cursor and, when the watch holds
no account (it opened, or was told the account changed), the account; ``store_pages``
stores the pages of many accounts together (the workers' group commit calls it), each
page answered with its own outcome.

UIDVALIDITY changed -> the cursor is reset and the mailbox re-read from the backfill
window; message ids survive the change, so nothing is ingested twice. An account
deleted mid-sync (its key shredded) ends it quietly as skipped.

Errors end the sync of this account only, classified by ``sync_outcome.error_kind``
and recorded (``record_failure``): auth -> the account goes to ``auth_error``
(``reauth_required`` for a refused OAuth2 grant; no retries until reconnected);
throttled -> stays active, the outcome carries the server's delay; anything transient
-> the next tick tries again. Logs carry the account id and the error class, never a
secret, address or message text.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from uuid import UUID

from application import worker_defaults as defaults
from application.context import Context
from application.errors import ConcurrencyConflict, StoreUnavailable
from application.mail.access import reveal
from application.mail.completion import BodyCompletion
from application.mail.flag_mirror import FlagMirror, FlagsMirrored
from application.mail.folder_reads import membership_reads, resync
from application.mail.folder_seen import FolderSeenStore, PollPlan
from application.mail.folder_sync import FolderSync
from application.mail.ingestion import MailIngestion, Page, PageStored
from application.mail.login_reads import LoginReads, read_logins
from application.mail.membership import MembershipPass
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
    OpenOptions,
)
from application.mail.resync import Resynced
from application.mail.sync_outcome import SYNC_ERRORS, DeadlineExceeded, SyncOutcome, error_kind
from application.ports import EventStore
from application.privacy import KeyErased
from application.streams import commit, load
from domain.mail_account import MailAccount

log = logging.getLogger("tidings.sync")


@dataclass(frozen=True)
class SyncSettings:
    backfill_window_days: int = defaults.BACKFILL_WINDOW_DAYS
    max_messages_per_poll: int = defaults.MAX_MESSAGES_PER_POLL
    parse_concurrency: int = defaults.PARSE_CONCURRENCY


class AccountSync:
    """Thread-safe: the poll's pool threads, the watches' threads and the watch path's
    group commit share one."""

    def __init__(
        self,
        ctx: Context,
        ingestion: MailIngestion,
        completion: BodyCompletion,
        settings: SyncSettings,
        today: Callable[[], date] = date.today,
        *,
        flags: FlagMirror | None = None,
        folders: FolderSync | None = None,
        membership: MembershipPass | None = None,
        seen: FolderSeenStore | None = None,
    ) -> None:
        self.ctx = ctx
        self.flags = flags  # None: flags are not mirrored
        self.ingestion = ingestion
        self.completion = completion
        self.settings = settings
        self.today = today
        self.folders = folders  # None: INBOX only
        self.membership = membership  # None: memberships are not mirrored
        self.seen = seen  # None: every folder is opened on every poll

    # --- the account and its session ------------------------------------------------------

    def syncable(self, account_id: str) -> MailAccount | None:
        """The account from the event store; None unless it is active."""
        return syncable(self.ctx.store, account_id)

    def read_logins(self, account_ids: Collection[str]) -> dict[str, LoginReads]:
        """What the logins of these accounts need, read together (``login_reads``)."""
        return read_logins(self.ctx, account_ids)

    def open_session(
        self,
        account: MailAccount,
        deadline: float | None = None,
        *,
        qresync: bool = False,
        secret: str | None = None,
    ) -> MailboxSession:
        """Log in to the account's mailbox (raises ``MailProviderError``); ``deadline``
        bounds everything the session does; ``qresync``: ENABLE it where offered (the
        poll's session, never the watch's); ``secret``: read ahead (None: read it now)."""
        account_id = str(account.id)
        if secret is None:
            secret = self.ctx.mail.secrets.get(account_id)
        if secret is None:
            raise MailboxAuthError("no usable secret for the account")
        username = reveal(self.ctx, account.imap["username"], account.tenant_id, account_id)
        endpoint = ImapEndpoint(
            host=account.imap["host"],
            port=int(account.imap["port"]),
            security=account.imap["security"],
            username=username or "",
        )
        owner = BlobOwner(account.tenant_id, account_id)
        options = OpenOptions(account_id, owner, deadline, qresync=qresync)
        return self.ctx.mail.provider.open(
            endpoint, Credentials(account.auth_method, secret), options
        )

    # --- the poll ---------------------------------------------------------------------------

    def sync(
        self,
        account_id: str,
        deadline: float | None = None,
        on_page: Callable[[int], None] | None = None,
    ) -> SyncOutcome:
        """Fetch and ingest everything new, page by page, on a connection of its own
        (closed afterwards); never raises for the account's own failures."""
        try:
            account = self.syncable(account_id)
        except StoreUnavailable as error:
            return self.failed(account_id, error)
        if account is None:
            return SyncOutcome(account_id, skipped=True)
        try:
            with self.open_session(account, deadline, qresync=True) as session:
                plan = PollPlan(session, self.seen, account_id)
                if self.ctx.mail.state.cursor(account_id) is None:
                    plan.forget(["INBOX"])  # a first sync, or a reset: read it whole
                ingested = duplicates = found = 0
                listed = False
                if not plan.unopened("INBOX"):
                    ingested, duplicates, found = self._pages(session, account, deadline, on_page)
                resynced = {"INBOX": resync(self.ctx, session, account, plan, "INBOX")}
                flags = self._folder_flags(
                    session, account, deadline, plan, "INBOX", resynced=resynced
                )
                if self.folders is not None:
                    check = lambda: _check(deadline)  # noqa: E731
                    more = self.folders.run(session, account, check, plan.unopened)
                    ingested, duplicates = ingested + more.ingested, duplicates + more.duplicates
                    plan.incomplete(more.waiting)
                    plan.forget(more.fresh)
                    listed = more.listed
                    if more.listed:  # folder events (a rename, All Mail) may be new
                        account = self.syncable(account_id) or account
                names = self._membership(session, account, deadline, plan, resynced, listed=listed)
                completed = found + self._bodies(session, account, deadline)
                plan.save(names)
        except SYNC_ERRORS as error:
            return self.failed(account_id, error)
        except (KeyErased, _Erased):
            log.info("sync.account_erased account_id=%s", account_id)
            return SyncOutcome(account_id, skipped=True)
        log.info(
            "sync.ok account_id=%s ingested=%d duplicates=%d completed=%d flags_changed=%d",
            account_id,
            ingested,
            duplicates,
            completed,
            flags.changed,
        )
        return SyncOutcome(
            account_id,
            ingested=ingested,
            duplicates=duplicates,
            completed=completed,
            listed=listed,
        )

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
            _check(deadline)
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

    def _folder_flags(
        self,
        session: MailboxSession,
        account: MailAccount,
        deadline: float | None,
        plan: PollPlan,
        folder: str,
        *,
        resynced: Mapping[str, tuple[Resynced, int] | None],
    ) -> FlagsMirrored:
        """``folder``'s flag changes (``flag_mirror``): none read where CONDSTORE says
        nothing changed, a QRESYNC answer's where there is one."""
        if self.flags is None:
            return FlagsMirrored()
        _check(deadline)
        answer = resynced.get(folder)
        mirrored = self.flags.mirror(session, account, folder, plan.now(folder), answer)
        if mirrored.held or mirrored.mode == "busy":
            plan.incomplete([folder])
        return mirrored

    def _membership(
        self,
        session: MailboxSession,
        account: MailAccount,
        deadline: float | None,
        plan: PollPlan,
        resynced: dict[str, tuple[Resynced, int] | None],
        *,
        listed: bool = False,
    ) -> list[str]:
        """The other synced folders' flag changes (``flag_mirror``), then moves, copies
        and deletions over the synced folders whose counters moved (``membership``):
        by QRESYNC's VANISHED where the session has it, searched where something may
        have left, read without a search where MESSAGES grew as UIDNEXT did. The synced
        folders' names, INBOX first."""
        names = ["INBOX"]
        if self.folders is not None and self.ctx.mail.folders is not None:
            rows = self.ctx.mail.folders.folders(str(account.id))
            names += [r.name for r in rows if r.name != "INBOX"]
        for name in names[1:]:
            _check(deadline)
            resynced[name] = resync(self.ctx, session, account, plan, name)
            self._folder_flags(session, account, deadline, plan, name, resynced=resynced)
        if self.membership is None:
            return names
        reads = membership_reads(
            plan, self.membership, account, session, names=names, resynced=resynced
        )
        if reads.any or listed:  # after a listing: a folder found gone places nothing now
            check = lambda: _check(deadline)  # noqa: E731
            placed = self.membership.run(
                session,
                account,
                reads.search,
                check,
                unexpunged=reads.unexpunged,
                vanished=reads.vanished,
            )
            if placed.busy or placed.held or placed.unbelieved:
                plan.incomplete(names)
        return names

    def _bodies(self, session: MailboxSession, account: MailAccount, deadline: float | None) -> int:
        """The deferred messages' bodies the budget allows now."""
        limit = self.settings.max_messages_per_poll
        return self.completion.run(session, account, limit, lambda: _check(deadline))

    # --- the watch path ---------------------------------------------------------------------

    def next_page(
        self,
        account_id: str,
        session: MailboxSession,
        account: MailAccount | None,
        cursor: MailboxCursor | None,
    ) -> Page | SyncOutcome:
        """One page after ``cursor`` (the watch's own; None: read it), fetched on the
        watch's session after IDLE, for the watch's ``account`` (None: load it; the page
        carries it); a failure, or an account no longer active, is the outcome instead."""
        try:
            if account is None:
                account = self.syncable(account_id)
            if account is None:  # no longer active: the supervisor stops the watch
                return SyncOutcome(account_id, skipped=True)
            if cursor is None:
                cursor = self.ctx.mail.state.cursor(account_id)
            return self.fetch_page(session, account, cursor, after_idle=True)
        except SYNC_ERRORS as error:
            return self.failed(account_id, error)
        except KeyErased:
            return SyncOutcome(account_id, skipped=True)

    def store_pages(self, pages: Sequence[Page]) -> list[SyncOutcome]:
        """Store pages of many accounts together: every page gets its outcome, never
        raises; a page that cannot be stored fails alone (its account records it)."""
        return [
            self._page_outcome(page, result)
            for page, result in zip(pages, self.ingestion.store_apart(pages), strict=True)
        ]

    def _page_outcome(self, page: Page, result: PageStored | Exception) -> SyncOutcome:
        account_id = str(page.account.id)
        if isinstance(result, KeyErased):  # the account was deleted meanwhile
            return SyncOutcome(account_id, skipped=True)
        if isinstance(result, Exception):
            if not isinstance(result, SYNC_ERRORS):  # a bug of ours: keep its traceback
                log.error("sync.page_failed account_id=%s", account_id, exc_info=result)
            return self.failed(account_id, result)
        if result.erased:
            return SyncOutcome(account_id, skipped=True)
        if result.ingested:
            log.info("sync.ok account_id=%s ingested=%d", account_id, result.ingested)
        return SyncOutcome(
            account_id,
            result.ingested,
            result.duplicates,
            has_more=page.has_more,
            completed=result.completed,
            cursor=page.cursor,
        )

    # --- both -------------------------------------------------------------------------------

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
        """The outcome of a sync that raised ``error`` (one of ``SYNC_ERRORS``), recorded
        by kind: auth -> the account's auth transition; throttled -> the server's delay."""
        kind, retry_after = error_kind(error), None
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

    def _auth_failed(self, account_id: str, error: MailboxAuthError) -> None:
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


def syncable(store: EventStore, account_id: str) -> MailAccount | None:
    """The account from ``store``; None unless it is active (raises ``StoreUnavailable``,
    and ``ValueError`` for what is not an account)."""
    account = load(store, MailAccount, UUID(account_id))
    return account if account.status == "active" else None


class _Erased(Exception):
    """The account was deleted (its key shredded) mid-sync: nothing left to do or record."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded("the account's poll deadline passed")
