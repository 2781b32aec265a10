"""When a watch's news of changed folders (NOTIFY) has its account polled: soon, once per
burst of news, and at a bounded rate.

Per account (the supervisor's loop thread only):

    quiet --news--> pending (a poll scheduled at ``due``) --a poll starts--> quiet
    pending --the due poll could not start (one still in flight)--> pending
            --that poll finished--> pending (scheduled again)

Invariants: news while pending schedules nothing, so a flood of STATUS lines is one poll;
a news poll is due ``debounce`` after the first news (the rest of a burst, a move's
expunge and its arrival, comes within it) and at least ``gap`` after the account's last
news poll started, so news polls one account at most once a ``gap`` whatever its server
sends; every news is followed by a poll that started after it (a poll in flight when
it came may have read the folder before the change). The poll is the account's ordinary
poll, on the poll path (``Poller``: one at a time per account, ``poll_concurrency`` in
all); any poll that starts serves what is pending.
"""

from __future__ import annotations

from workers.policies.scheduling import DueScheduler

DEBOUNCE = 0.5
GAP = 5.0
KEEP_STARTS = 4096  # past this many remembered starts, the ones older than ``gap`` go


class FolderNews:
    def __init__(
        self, polls: DueScheduler[str], *, debounce: float = DEBOUNCE, gap: float = GAP
    ) -> None:
        self._polls = polls
        self.debounce = debounce
        self.gap = gap
        self._pending: set[str] = set()
        self._started: dict[str, float] = {}  # when its last news poll started

    def heard(self, account_id: str, now: float) -> None:
        """A watch heard of a change: the account's poll is brought forward (once)."""
        if account_id in self._pending:
            return
        self._pending.add(account_id)
        self._schedule(account_id, now)

    def started(self, account_id: str, now: float) -> None:
        """A poll of the account started (or was given to another worker): what was
        pending is served."""
        if account_id in self._pending:
            self._pending.discard(account_id)
            self._started[account_id] = now
            if len(self._started) > KEEP_STARTS:
                self._started = {a: t for a, t in self._started.items() if t > now - self.gap}

    def finished(self, account_id: str, now: float) -> None:
        """A poll of the account finished: news it could not serve is scheduled again."""
        if account_id in self._pending:
            self._schedule(account_id, now)

    def pending(self, account_id: str) -> bool:
        return account_id in self._pending

    def forget(self, account_id: str) -> None:
        self._pending.discard(account_id)
        self._started.pop(account_id, None)

    def _schedule(self, account_id: str, now: float) -> None:
        last = self._started.get(account_id)
        due = now + self.debounce if last is None else max(now + self.debounce, last + self.gap)
        self._polls.schedule(account_id, due, only_earlier=True)
