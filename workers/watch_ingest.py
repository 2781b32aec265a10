"""The watch path's ingestion: what the watch manager calls back, from its threads.

An account is loaded once per watch (its status is the syncable check, its settings are
what a page is ingested with) and loaded again after the supervisor hears it changed.
A watch keeps the cursor its last page saved, so a page costs no cursor read; after a
failure it is read again (a poll may have moved it meanwhile: dedup absorbs the overlap).
Pages go through one ``GroupCommitter``: a burst of new mail in thousands of watched
accounts becomes a few large appends instead of thousands of small ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from uuid import UUID

from application.errors import StoreUnavailable
from application.mail.ingestion import Page
from application.mail.ports import MailboxCursor, MailboxSession
from application.mail.state import ErrorKind
from application.streams import load
from domain.mail_account import MailAccount
from workers.committer import GroupCommitter
from workers.metrics import WorkerMetrics
from workers.news import MailSeen, News, WatchStopped
from workers.policies.watch_stops import WhyStopped
from workers.sync import AccountSyncer, SyncOutcome


class WatchIngest:
    def __init__(
        self,
        syncer: AccountSyncer,
        metrics: WorkerMetrics,
        tell: Callable[[News], None],
    ) -> None:
        self._syncer = syncer
        self._metrics = metrics
        self._tell = tell
        self._accounts: dict[str, MailAccount] = {}
        self._cursors: dict[str, MailboxCursor] = {}
        self._lock = threading.Lock()
        self._committer: GroupCommitter[Page, SyncOutcome] = GroupCommitter(
            syncer.commit_group,
            lambda page, _: SyncOutcome(str(page.account.id), error_kind=ErrorKind.ERROR),
            name="watch-commit",
        )

    def open_session(self, account_id: str) -> MailboxSession:
        account = self._load(account_id)
        if account.status != "active":
            raise LookupError("account is not syncable")
        return self._syncer.open_session(account)

    def sync(
        self, account_id: str, session: MailboxSession, done: Callable[[SyncOutcome], None]
    ) -> None:
        with self._lock:
            account = self._accounts.get(account_id)
            cursor = self._cursors.get(account_id)
        if account is None:
            try:
                account = self._load(account_id)
            except StoreUnavailable as error:
                done(self._syncer.failed(account_id, error))
                return
        started = time.monotonic()

        def ingested(outcome: SyncOutcome) -> None:
            with self._lock:
                if outcome.cursor is not None:
                    self._cursors[account_id] = outcome.cursor
                else:
                    self._cursors.pop(account_id, None)
            if outcome.ingested:
                self._metrics.ingested.labels("watch").inc(outcome.ingested)
                self._metrics.ingest_latency.observe(time.monotonic() - started)
            done(outcome)

        self._syncer.sync_page(account, session, cursor, self._committer, ingested)

    def changed(self, account_id: str) -> None:
        """The account changed (or its watch stopped): its next page reads it afresh."""
        with self._lock:
            self._accounts.pop(account_id, None)
            self._cursors.pop(account_id, None)

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

    def close(self) -> None:
        self._committer.close()

    def _load(self, account_id: str) -> MailAccount:
        account = load(self._syncer.ctx.store, MailAccount, UUID(account_id))
        with self._lock:
            self._accounts[account_id] = account
        return account
