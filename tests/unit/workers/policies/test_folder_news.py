"""The debounce of a watch's news of changed folders into polls: one poll per burst, at
most one news poll a gap per account, and never news left without a poll after it."""

from __future__ import annotations

from workers.policies.folder_news import FolderNews
from workers.policies.scheduling import DueScheduler


def news_policy() -> tuple[FolderNews, DueScheduler[str]]:
    polls: DueScheduler[str] = DueScheduler()
    return FolderNews(polls, debounce=0.5, gap=5.0), polls


def test_a_burst_of_news_is_one_poll_soon() -> None:
    news, polls = news_policy()
    polls.schedule("a", 1300.0)  # the next ordinary poll
    for i in range(10_000):  # a flood of STATUS lines
        news.heard("a", 1000.0 + i * 0.00001)
    assert polls.due_at("a") == 1000.5
    assert polls.pop_due(1000.5) == ["a"]
    news.started("a", 1000.5)
    assert not news.pending("a")


def test_news_polls_one_account_at_most_once_a_gap() -> None:
    news, polls = news_policy()
    news.heard("a", 1000.0)
    polls.pop_due(1000.5)
    news.started("a", 1000.5)
    news.heard("a", 1001.0)  # right after: waits for the gap
    assert polls.due_at("a") == 1005.5
    news.heard("a", 1002.0)
    assert polls.due_at("a") == 1005.5


def test_news_never_delays_a_poll_due_sooner() -> None:
    news, polls = news_policy()
    polls.schedule("a", 1000.2)
    news.heard("a", 1000.0)
    assert polls.due_at("a") == 1000.2


def test_news_while_a_poll_runs_has_a_poll_after_it() -> None:
    news, polls = news_policy()
    # A poll is in flight; news comes; its due poll cannot start (the Poller skips an
    # account still syncing), so it stays pending until that poll finishes.
    news.heard("a", 1000.0)
    assert polls.pop_due(1000.5) == ["a"]
    assert news.pending("a")  # not started: the supervisor did not call ``started``
    news.finished("a", 1003.0)
    assert polls.due_at("a") == 1003.5
    news.finished("b", 1003.0)  # nothing pending for b: nothing scheduled
    assert polls.due_at("b") is None


def test_forgotten_accounts_leave_nothing_behind() -> None:
    news, _ = news_policy()
    news.heard("a", 1000.0)
    news.forget("a")
    assert not news.pending("a")
    news.heard("a", 1001.0)
    assert news.pending("a")
