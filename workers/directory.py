"""What the supervisor knows of the accounts: refreshed from the account read model,
and corrected at once from the event store when a signal names an account.

Reading and knowing are split, so the supervisor's loop never waits for the database
(an outage would stall lease renewals and signals): ``fetch`` (read model) and
``lookup`` (event store) only read and run off the loop (``fetch`` on one thread at a
time: the reader's); ``apply``, ``learn`` and ``forget`` change what is known and run on
the loop's thread only.

``fetch`` reads every account only at first and every ``full_every`` seconds; between
those it reads the rows changed since (the read model's ``changed_at``, a log position:
``projections.mail_accounts``) and applies them to what it read before. Re-reading
10,000 accounts at every fleet tick was a tenth of a joining worker's CPU. The full
read catches whatever a change marker cannot show: a read model rebuilt from a
corrected projection, rows from before the marker was kept.

The read model lags the event store (a projection runner applies events a moment after
they are written), so a refresh right after a signal would undo the signal's news: a
reconnected account would vanish again, a disconnected one come back. What ``learn``
(or ``forget``) was told therefore wins over the read model until the read model agrees
with it, or for ``grace`` seconds at most (a later change whose signal was lost is then
picked up from the read model as before).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from application.errors import StoreUnavailable
from application.mail.account_sync import syncable
from application.mail.read_model import MailReadModel
from application.ports import EventStore
from workers.account_info import AccountInfo, SharedActivity
from workers.news import AccountLookedUp, DirectoryFetched, News

log = logging.getLogger("tidings.directory")

FULL_READ_EVERY = 60.0  # seconds between two reads of every account


class AccountDirectory:
    def __init__(
        self,
        read_model: MailReadModel,
        store: EventStore,
        *,
        grace: float = 60.0,
        full_every: float = FULL_READ_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_model = read_model
        self._store = store
        self._grace = grace
        self._full_every = full_every
        self._clock = clock
        # ``fetch``'s own (the reader thread's): the syncable accounts as last read, and
        # the log position up to which every change is in them (None: read them all).
        self._fetched: dict[str, AccountInfo] = {}
        self._mark: int | None = None
        self._full_at = 0.0
        self._learnt: dict[str, tuple[AccountInfo | None, float]] = {}
        self.syncable: dict[str, AccountInfo] = {}
        # ``of_user``'s index, rebuilt on first use after a change: a burst of user-active
        # signals (one per user) would otherwise scan every account for each of them.
        self._of_user: dict[tuple[str, str | None], list[str]] | None = None
        self._shared: dict[str, list[str]] = {}

    # --- reading (any thread) -----------------------------------------------------------

    def fetch(self) -> dict[str, AccountInfo]:
        """The syncable accounts as the read model has them: all of them read at first
        and every ``full_every`` seconds, else the last answer with what changed since."""
        now = self._clock()
        if self._mark is None or now >= self._full_at:
            # The mark before the rows: a change in between is read again next time.
            mark = self._read_model.account_mark()
            rows = self._read_model.accounts(None, syncable_only=True)
            self._fetched = {row["accountId"]: _info(row) for row in rows}
            self._mark, self._full_at = mark, now + self._full_every
        else:
            for row in self._read_model.accounts_changed_after(self._mark):
                if row["status"] == "active":
                    self._fetched[row["accountId"]] = _info(row)
                else:
                    self._fetched.pop(row["accountId"], None)
                self._mark = max(self._mark, row["changedAt"])
        return dict(self._fetched)

    def lookup(self, account_id: str) -> AccountInfo | None:
        """The account's current state from the event store (None: not syncable)."""
        try:
            account = syncable(self._store, account_id)
        except ValueError:  # not an account id, or not an account's stream
            return None
        if account is None:
            return None
        return AccountInfo(
            account_id,
            account.tenant_id,
            account.owner_user_id,
            account.scope,
            str(account.imap.get("host", "")),
        )

    # --- knowing (the loop's thread) ------------------------------------------------------

    def apply(self, fresh: dict[str, AccountInfo]) -> None:
        """Take a ``fetch`` result as the syncable accounts, except where ``learn`` knows
        better than the (lagging) read model."""
        fresh = dict(fresh)
        now = self._clock()
        for account_id, (info, at) in list(self._learnt.items()):
            if (account_id in fresh) == (info is not None) or now - at > self._grace:
                del self._learnt[account_id]  # the read model caught up (or too old)
            elif info is None:
                fresh.pop(account_id, None)
            else:
                fresh[account_id] = info
        self.syncable = fresh
        self._of_user = None

    def learn(self, account_id: str, info: AccountInfo | None) -> None:
        """A ``lookup`` result: syncable (``info``) or not, whatever the read model says yet."""
        if info is None:
            self.syncable.pop(account_id, None)
        else:
            self.syncable[account_id] = info
        self._learnt[account_id] = (info, self._clock())
        self._of_user = None

    def forget(self, account_id: str) -> None:
        """Not syncable any more (e.g. an auth error)."""
        self.learn(account_id, None)

    def of_user(self, tenant_id: str, user_id: str) -> list[str]:
        """A user's own accounts and its tenant's shared ones."""
        if self._of_user is None:
            self._index()
        assert self._of_user is not None
        return [*self._shared.get(tenant_id, ()), *self._of_user.get((tenant_id, user_id), ())]

    def _index(self) -> None:
        own: dict[tuple[str, str | None], list[str]] = {}
        shared: dict[str, list[str]] = {}
        for a in self.syncable.values():
            if a.scope == "shared":
                shared.setdefault(a.tenant_id, []).append(a.account_id)
            else:
                own.setdefault((a.tenant_id, a.owner_user_id), []).append(a.account_id)
        self._of_user, self._shared = own, shared


def _info(row: dict[str, Any]) -> AccountInfo:
    return AccountInfo(
        row["accountId"],
        row["tenantId"],
        row["ownerUserId"],
        row["scope"],
        str(row["imap"].get("host", "")),
    )


class DirectoryReader:
    """Runs a directory's database reads on a thread of its own and hands the answers to
    ``tell`` (the supervisor's inbox): ``DirectoryFetched`` for a ``refresh``,
    ``AccountLookedUp`` for a ``lookup``. One refresh at a
    time (``refreshed`` re-arms it); reads run in the order asked, so a reconnect's
    lookup answers after the disconnect's. A failed lookup is dropped (signals are best
    effort: the next refresh catches up)."""

    def __init__(
        self,
        directory: AccountDirectory,
        tell: Callable[[News], None],
        shared: Callable[[dict[str, AccountInfo]], SharedActivity] | None = None,
    ) -> None:
        self._directory = directory
        self._tell = tell
        self._shared = shared  # the fleet's tier state, read with every refresh
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="directory")
        self._refreshing = False

    def refresh(self) -> None:
        if not self._refreshing:
            self._refreshing = True
            self._submit(self._fetch)

    def refreshed(self) -> None:
        self._refreshing = False

    def lookup(self, account_id: str) -> None:
        self._submit(self._lookup, account_id)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # closed
            self._pool.submit(work, *args)

    def _fetch(self) -> None:
        fresh: dict[str, AccountInfo] | None = None
        activity: SharedActivity | None = None
        try:
            fresh = self._directory.fetch()
        except StoreUnavailable:
            log.warning("directory.unavailable")
        except Exception as error:  # a bug must not stop the refreshes for good
            log.exception("directory.failed error=%s", type(error).__name__)
        if fresh is not None and self._shared is not None:
            try:
                activity = self._shared(fresh)
            except Exception as error:  # the accounts still count without it
                log.exception("directory.tiers_failed error=%s", type(error).__name__)
        self._tell(DirectoryFetched(fresh, activity))

    def _lookup(self, account_id: str) -> None:
        try:
            info = self._directory.lookup(account_id)
        except Exception as error:  # best effort, like the signal itself
            log.warning(
                "directory.lookup_failed account_id=%s error=%s", account_id, type(error).__name__
            )
            return
        self._tell(AccountLookedUp(account_id, info))
