"""Which watch states and tiers a worker reports, and which rows it writes."""

from __future__ import annotations

from workers.policies.tiers import Tier
from workers.policies.watch_report import WatchStatus, changes, statuses

TIERS: dict[str, Tier] = {"w": "hot", "b": "hot", "i": "hot", "x": "hot", "m": "warm", "c": "cold"}


def test_held_accounts_are_watching_backing_off_or_idle_and_polled_ones_idle() -> None:
    report = statuses(
        TIERS,
        held={"w", "b", "i"},
        watching={"w"},
        backing_off={"b"},
        owns_poll=lambda account: account != "c",
    )
    assert report == {
        "w": WatchStatus("watching", "hot"),
        "b": WatchStatus("backoff", "hot"),
        "i": WatchStatus("idle", "hot"),
        "m": WatchStatus("idle", "warm"),
        # "x": hot but held elsewhere (or by nobody): its holder reports it
        # "c": another worker polls it
    }


def test_only_changes_are_written_and_accounts_given_up_are_cleared() -> None:
    before = {"a": WatchStatus("watching", "hot"), "b": WatchStatus("idle", "warm")}
    after = {"a": WatchStatus("backoff", "hot"), "c": WatchStatus("idle", "cold")}
    assert changes(before, after) == {
        "a": WatchStatus("backoff", "hot"),
        "b": None,
        "c": WatchStatus("idle", "cold"),
    }
    assert changes(after, dict(after)) == {}
