"""The watch path's ingestion: what the watch manager calls, from its threads.

State, per watched account: the account as ``AccountSync.syncable`` loaded it when its
watch opened (the one load of a watch; dropped by ``changed``, loaded again by the next
page), and the cursor its last page saved, so a page costs no cursor read; after a
failure the cursor is read again (a poll may have moved it meanwhile: dedup absorbs
the overlap). Logins that start together have the account, secret and cursor read for
them together (``prepare``), kept for ``READ_AHEAD_FOR`` at most.

A page is fetched on the watch's thread and stored through one ``GroupCommitter`` with
other accounts' pages (a burst of new mail in thousands of watched accounts becomes a
few large appends instead of thousands of small ones); ``sync`` answers with a future
of the page's ``SyncOutcome``, resolved on the committer thread.

Where the server offers NOTIFY, a watch has the account's other synced folders pushed
(``watch_folders``: the folder state read once per watch start, and again after a
listing); their news becomes ``FoldersChanged`` for the supervisor, which polls soon.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

from application.errors import StoreUnavailable
from application.mail.account_sync import AccountSync
from application.mail.folder_push import push_folders
from application.mail.folder_state import FolderStateStore
from application.mail.ingestion import Page
from application.mail.login_reads import LoginReads
from application.mail.ports import MailboxCursor, MailboxSession
from application.mail.state import ErrorKind
from application.mail.sync_outcome import SyncOutcome
from domain.mail_account import MailAccount
from workers.committer import GroupCommitter
from workers.metrics import WorkerMetrics
from workers.news import FoldersChanged, MailSeen, News, WatchStopped
from workers.policies.watch_stops import WhyStopped

log = logging.getLogger("tidings.watch")

# How long what ``prepare`` read stays good for a login that has not started yet: a
# flood of logins starts within seconds; a secret rotated since is read again after this.
READ_AHEAD_FOR = 30.0


def watch_committer(sync: AccountSync) -> GroupCommitter[Page, SyncOutcome]:
    """The group commit of the watch path's pages."""
    return GroupCommitter(sync.store_pages, _unstored, name="watch-commit")


def _unstored(page: Page, error: Exception) -> SyncOutcome:
    return SyncOutcome(str(page.account.id), error_kind=ErrorKind.ERROR)


def answered(outcome: SyncOutcome) -> Future[SyncOutcome]:
    """A future that has its answer already (a page that failed before the commit)."""
    answer: Future[SyncOutcome] = Future()
    answer.set_result(outcome)
    return answer


class WatchIngest:
    def __init__(
        self,
        sync: AccountSync,
        committer: GroupCommitter[Page, SyncOutcome],
        metrics: WorkerMetrics,
        tell: Callable[[News], None],
        folders: FolderStateStore | None = None,
    ) -> None:
        self._sync = sync
        self._folders = folders
        self._committer = committer
        self._metrics = metrics
        self._tell = tell
        self._accounts: dict[str, MailAccount] = {}
        self._cursors: dict[str, MailboxCursor] = {}
        self._ahead: dict[str, tuple[LoginReads, float]] = {}  # read by ``prepare``, when
        self._lock = threading.Lock()

    def prepare(self, account_ids: list[str]) -> None:
        """Read what these accounts' logins need, together; each login that finds none
        (a failed read included) reads its own."""
        try:
            reads = self._sync.read_logins(account_ids)
        except Exception as error:  # only a shortcut: each login reads its own
            log.warning(
                "watch.read_ahead_failed accounts=%d error=%s",
                len(account_ids),
                type(error).__name__,
            )
            return
        now = time.monotonic()
        with self._lock:
            for account_id, read in reads.items():
                self._ahead[account_id] = (read, now)

    def open_session(self, account_id: str) -> MailboxSession:
        with self._lock:
            read, at = self._ahead.pop(account_id, (None, 0.0))
            if read is not None and time.monotonic() - at > READ_AHEAD_FOR:
                read = None
            if read is not None:
                self._accounts[account_id] = read.account
                if read.cursor is not None:
                    self._cursors.setdefault(account_id, read.cursor)
        if read is not None:  # the login itself outside the lock: it waits on the server
            return self._sync.open_session(read.account, secret=read.secret)
        account = self._account(account_id)
        if account is None:
            raise LookupError("account is not syncable")
        return self._sync.open_session(account)

    def sync(self, account_id: str, session: MailboxSession) -> Future[SyncOutcome]:
        """Fetch the next page on this thread; the future answers once it is stored."""
        with self._lock:
            account = self._accounts.get(account_id)
            cursor = self._cursors.get(account_id)
        started = time.monotonic()
        fetched = self._sync.next_page(account_id, session, account, cursor)
        if isinstance(fetched, SyncOutcome):
            answer = answered(fetched)
        else:
            if account is None:  # loaded afresh for this page (after ``changed``)
                self._remember(fetched.account)
            answer = self._committer.submit(fetched)
        # Added before the caller's own callbacks, so the cursor is kept before the next page.
        answer.add_done_callback(partial(self._stored, account_id, started))
        return answer

    def _stored(self, account_id: str, started: float, answer: Future[SyncOutcome]) -> None:
        outcome = answer.result()
        with self._lock:
            if outcome.cursor is not None:
                self._cursors[account_id] = outcome.cursor
            else:
                self._cursors.pop(account_id, None)
        if outcome.ingested:
            self._metrics.ingested.labels("watch").inc(outcome.ingested)
            self._metrics.ingest_latency.observe(time.monotonic() - started)

    def changed(self, account_id: str) -> None:
        """The account changed (or its watch stopped): its next page reads it afresh."""
        with self._lock:
            self._accounts.pop(account_id, None)
            self._cursors.pop(account_id, None)
            self._ahead.pop(account_id, None)

    def on_stopped(
        self,
        account_id: str,
        generation: int,
        reason: WhyStopped,
        error: BaseException | None,
        lived: float,
    ) -> None:
        self.changed(account_id)
        self._tell(WatchStopped(account_id, reason, error, lived))

    def on_mail(self, account_id: str, outcome: SyncOutcome) -> None:
        self._tell(MailSeen(account_id))

    def watch_folders(self, account_id: str, session: MailboxSession) -> None:
        """NOTIFY for the account's other synced folders, where the server offers it. The
        folder state out of reach leaves them to the poll: the watch goes on."""
        try:
            pushed = push_folders(self._folders, account_id, session)
        except StoreUnavailable:
            pushed = False
        if pushed:
            log.info("watch.folders_pushed account_id=%s", account_id)

    def on_folders_changed(self, account_id: str) -> None:
        self._tell(FoldersChanged(account_id))

    def close(self) -> None:
        self._committer.close()

    def _account(self, account_id: str) -> MailAccount | None:
        account = self._sync.syncable(account_id)
        if account is not None:
            self._remember(account)
        return account

    def _remember(self, account: MailAccount) -> None:
        with self._lock:
            self._accounts[str(account.id)] = account
