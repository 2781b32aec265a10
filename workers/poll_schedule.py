"""Starting the supervisor's due polls: which of them this worker owns, and when each
is due next. Loop thread only.

The supervisor's fleet tick leaves here what a poll's start needs: the live workers it
read (``live``), the tiers it classified (``tiers``: a due poll's next time) and the hot
leases other workers held (``held_elsewhere``: their holders poll them). Who polls an
account is decided when its poll starts, not when it is scheduled: a worker that just
joined, or an account another worker took meanwhile, changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from application.mail.sync_outcome import SyncOutcome
from workers.collaborators import Polls
from workers.policies import fleet
from workers.policies.folder_news import FolderNews
from workers.policies.scheduling import DueScheduler
from workers.policies.tiers import Tier, TierPolicy


class PollStarts:
    def __init__(
        self,
        worker_id: str,
        *,
        polls: DueScheduler[str],
        tiers: TierPolicy,
        poller: Polls,
        folder_news: FolderNews,
        holds_lease: Callable[[str], bool],
        syncable: Callable[[], Collection[str]],
        done: Callable[[SyncOutcome], None],
    ) -> None:
        self._me = worker_id
        self._polls = polls
        self._tier_policy = tiers
        self.poller = poller
        self._folder_news = folder_news
        self._holds_lease = holds_lease
        self._syncable = syncable
        self._done = done
        self.live: dict[str, int] | None = None  # the last tick's live workers
        self.tiers: dict[str, Tier] = {}  # the last tick's: a due poll's next time
        self.held_elsewhere: Mapping[str, float] = {}  # hot leases others held

    def hot_budget(self) -> int:
        """The fleet's hot budget for the live workers last read (this one alone when
        the fleet is unknown): the same for claims and for the poll schedule."""
        return self._tier_policy.hot_budget(len(self.live) if self.live else 1)

    def owns_poll(self, account_id: str) -> bool:
        return fleet.owns_poll(
            account_id,
            self._me,
            holds_lease=self._holds_lease(account_id),
            held_elsewhere=account_id in self.held_elsewhere,
            live_workers=self.live,
        )

    def start_due(self, wall: float) -> None:
        """Due polls, as many as the poller can start now: the rest stay due here, where
        who owns each is decided when it starts (a worker that just joined, or an account
        another worker took meanwhile, changes it)."""
        syncable = self._syncable()
        while (free := self.poller.free_slots()) > 0:
            due = self._polls.pop_due(wall, limit=free)
            if not due:
                return
            for account_id in due:
                if account_id not in syncable:
                    continue
                if account_id not in self.tiers:  # learnt since the last tick
                    self.tiers = self._tier_policy.classify(wall, self.hot_budget())
                tier = self.tiers.get(account_id, "warm")
                self._polls.schedule(account_id, self._tier_policy.next_poll_at(tier, wall))
                if not self.owns_poll(account_id) or self.poller.submit(account_id, self._done):
                    self._folder_news.started(account_id, wall)
