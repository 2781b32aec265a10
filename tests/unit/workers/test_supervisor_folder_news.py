"""The supervisor turns a watch's news of changed folders (NOTIFY) into the account's poll,
soon and once per burst; news while that account's poll runs has another poll after it;
a poll that listed the folders again has the watch ask for them anew (only where folders
are pushed at all: ``folder_notify``). Fakes only."""

from __future__ import annotations

import time
from collections.abc import Callable

from application.mail.sync_outcome import SyncOutcome
from tests.unit.workers import fakes
from tests.unit.workers.test_supervisor_leases import fake_supervisor, info
from workers.account_info import AccountInfo
from workers.news import DirectoryFetched, FoldersChanged, PollDone
from workers.policies.folder_news import DEBOUNCE, GAP
from workers.supervisor import CHORES_INTERVAL, Supervisor
from workers.supervisor_settings import SupervisorSettings


class BusyPolls(fakes.Polls):
    """A poll of the account is still running: submits are refused while ``busy``."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = False

    def submit(self, account_id: str, on_done: Callable[[SyncOutcome], None]) -> bool:
        if self.busy:
            return False
        return super().submit(account_id, on_done)


def world(
    accounts: dict[str, AccountInfo], *, folder_notify: bool = True
) -> tuple[Supervisor, fakes.Watches, BusyPolls]:
    watches, polls = fakes.Watches(), BusyPolls()
    sup = fake_supervisor(
        SupervisorSettings(worker_id="w1", folder_notify=folder_notify),
        watches=watches,
        poller=polls,
    )
    sup.inbox.tell(DirectoryFetched(accounts))
    sup.turn()
    for account_id in accounts:  # the first polls a long way off
        sup.polls.schedule(account_id, time.time() + 300)
    return sup, watches, polls


def turn_after(sup: Supervisor, seconds: float) -> None:
    time.sleep(seconds + CHORES_INTERVAL)
    sup.turn()


def test_a_burst_of_news_is_one_poll_soon_and_the_next_waits_for_the_gap() -> None:
    sup, _, polls = world({"a": info("a"), "b": info("b")})
    for _ in range(1_000):
        sup.inbox.tell(FoldersChanged("a"))
    sup.turn()
    due = sup.polls.due_at("a")
    assert due is not None and due <= time.time() + DEBOUNCE
    turn_after(sup, DEBOUNCE)
    assert polls.submitted == ["a"]  # one poll, of that account only
    sup.inbox.tell(FoldersChanged("a"))
    sup.turn()
    due = sup.polls.due_at("a")
    assert due is not None and due >= time.time() + GAP - 1.0


def test_news_while_the_accounts_poll_runs_has_a_poll_after_it() -> None:
    sup, _, polls = world({"a": info("a")})
    polls.busy = True
    sup.inbox.tell(FoldersChanged("a"))
    turn_after(sup, DEBOUNCE)
    assert polls.submitted == []  # skipped: still syncing
    assert sup.folder_news.pending("a")
    polls.busy = False
    sup.inbox.tell(PollDone(SyncOutcome("a")))  # that poll ends: the news is due again
    turn_after(sup, DEBOUNCE)
    assert polls.submitted == ["a"]
    assert not sup.folder_news.pending("a")


def test_a_poll_that_listed_the_folders_has_the_watch_ask_again() -> None:
    sup, watches, _ = world({"a": info("a")})
    sup.inbox.tell(PollDone(SyncOutcome("a")))
    sup.turn()
    assert watches.refreshed == []
    sup.inbox.tell(PollDone(SyncOutcome("a", listed=True)))
    sup.turn()
    assert watches.refreshed == ["a"]


def test_without_pushed_folders_a_listing_asks_nothing_of_the_watch() -> None:
    sup, watches, _ = world({"a": info("a")}, folder_notify=False)
    sup.inbox.tell(PollDone(SyncOutcome("a", listed=True)))
    sup.turn()
    assert watches.refreshed == []  # no DONE and IDLE again for folders it never asked for
