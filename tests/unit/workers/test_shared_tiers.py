"""The fleet's shared tier state, with fakes for the activity store and the read model:
what ``SharedTierState`` reads for a tick's accounts (one call to each source for all of
them; shared accounts by their tenant, user accounts by their owner; a failing source
leaves only its own part empty), and what a supervisor that knows no history does with
it: the accounts that were hot are claimed and watched in its first ticks."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from application.mail.activity import ActiveTimes, ActivityUnavailable, UserKey
from tests.unit.workers import fakes
from tests.unit.workers.test_supervisor_leases import fake_supervisor
from workers.account_info import AccountInfo, SharedActivity
from workers.news import DirectoryFetched
from workers.policies.watch_report import WatchStatus
from workers.shared_tiers import SharedTierState
from workers.supervisor import FLEET_COALESCE
from workers.supervisor_settings import SupervisorSettings

NOW = 1_800_000_000.0


class FakeActivity:
    def __init__(self, times: ActiveTimes, *, down: bool = False) -> None:
        self.times = times
        self.down = down
        self.calls: list[tuple[set[UserKey], set[str]]] = []
        self.restored: list[tuple[dict[UserKey, float], dict[str, float]]] = []

    @property
    def window(self) -> float:
        return 1800.0

    def record(self, tenant_id: str, user_id: str, at: float) -> None:
        raise AssertionError("workers only read")

    def last_active(
        self, users: Collection[UserKey], tenants: Collection[str], now: float
    ) -> ActiveTimes:
        self.calls.append((set(users), set(tenants)))
        if self.down:
            raise ActivityUnavailable("down")
        return self.times

    def restore(
        self, users: Mapping[UserKey, float], tenants: Mapping[str, float], now: float
    ) -> None:
        self.restored.append((dict(users), dict(tenants)))


class FakeMail:
    def __init__(self, recent: dict[str, float], *, down: bool = False) -> None:
        self.recent = recent
        self.down = down
        self.since: list[float] = []

    def recent_mail(self, since: float) -> dict[str, float]:
        self.since.append(since)
        if self.down:
            raise ConnectionError("database down")
        return {a: t for a, t in self.recent.items() if t >= since}


ACCOUNTS = {
    "mine": AccountInfo("mine", "t1", "u1", "user", "imap.example"),
    "theirs": AccountInfo("theirs", "t1", "u2", "user", "imap.example"),
    "team": AccountInfo("team", "t1", None, "shared", "imap.example"),
    "other": AccountInfo("other", "t2", None, "shared", "imap.example"),
    "mailed": AccountInfo("mailed", "t3", "u3", "user", "imap.example"),
}


def state(activity: FakeActivity, mail: FakeMail) -> SharedTierState:
    model: Any = mail  # only recent_mail is asked for
    return SharedTierState(activity, model, recent_mail_window=3600.0, clock=lambda: NOW)


def test_one_read_of_each_source_for_all_accounts_mapped_back_to_accounts() -> None:
    activity = FakeActivity(ActiveTimes(users={("t1", "u1"): NOW - 10}, tenants={"t1": NOW - 5}))
    mail = FakeMail({"mailed": NOW - 60, "gone": NOW - 1, "theirs": NOW - 7200})
    shared = state(activity, mail).read(ACCOUNTS)
    assert activity.calls == [({("t1", "u1"), ("t1", "u2"), ("t3", "u3")}, {"t1", "t2"})]
    assert mail.since == [NOW - 3600.0]
    assert shared.user_active == {"mine": NOW - 10, "team": NOW - 5}
    assert shared.mail == {"mailed": NOW - 60}, "accounts not of this directory are dropped"


def test_a_failing_source_leaves_only_its_own_part_empty() -> None:
    times = ActiveTimes(users={("t1", "u1"): NOW - 10})
    no_redis = state(FakeActivity(times, down=True), FakeMail({"mailed": NOW - 60}))
    assert no_redis.read(ACCOUNTS) == SharedActivity({}, {"mailed": NOW - 60})
    no_db = state(FakeActivity(times), FakeMail({}, down=True))
    assert no_db.read(ACCOUNTS) == SharedActivity({"mine": NOW - 10}, {})


def test_activity_the_store_lost_still_counts_and_is_written_back() -> None:
    """Redis came back empty while the worker ran: what it read before stays, and goes
    back to the store, so a fleet restarted next finds it there."""
    known = ActiveTimes(users={("t1", "u1"): NOW - 10}, tenants={"t1": NOW - 5, "t2": NOW - 8})
    activity = FakeActivity(known)
    tiers = state(activity, FakeMail({}))
    before = tiers.read(ACCOUNTS)
    assert activity.restored == []

    activity.times = ActiveTimes(tenants={"t1": NOW - 1})  # t1 newer again; the rest lost
    after = tiers.read(ACCOUNTS)
    assert after.user_active == {**before.user_active, "team": NOW - 1}
    assert activity.restored == [({("t1", "u1"): NOW - 10}, {"t2": NOW - 8})]

    activity.times = ActiveTimes(users={("t1", "u1"): NOW - 10}, tenants={"t1": NOW - 1})
    tiers.read(ACCOUNTS)
    assert len(activity.restored) == 2, "what the store holds again is not written twice"


def test_remembered_activity_ends_with_its_window() -> None:
    activity = FakeActivity(ActiveTimes(users={("t1", "u1"): NOW - 10}))
    clock = [NOW]
    model: Any = FakeMail({})
    tiers = SharedTierState(activity, model, clock=lambda: clock[0])
    tiers.read(ACCOUNTS)
    activity.times = ActiveTimes()
    clock[0] = NOW - 10 + activity.window  # the window has passed
    assert tiers.read(ACCOUNTS).user_active == {}
    assert activity.restored == []


def test_remembered_activity_of_an_account_no_longer_listed_is_not_restored() -> None:
    activity = FakeActivity(ActiveTimes(users={("t1", "u1"): NOW - 10}))
    tiers = state(activity, FakeMail({}))
    tiers.read(ACCOUNTS)
    activity.times = ActiveTimes()
    tiers.read({a: info for a, info in ACCOUNTS.items() if a != "mine"})
    assert activity.restored == []


def test_a_restarted_supervisor_claims_what_was_hot_and_only_that() -> None:
    """No signal, no poll, no memory: the first directory answer carries the shared
    state, and the hot accounts are watched in the tick right after it."""
    watches, report = fakes.Watches(), fakes.Report()
    sup = fake_supervisor(
        SupervisorSettings(worker_id="w1", lease_ttl=30.0, fleet_tick=60.0),
        watches=watches,
        status=report,
    )
    sup.turn()  # the first tick: nothing known yet
    wall = time.time()
    accounts = {a: ACCOUNTS[a] for a in ("mine", "theirs", "mailed")}
    activity = SharedActivity(user_active={"mine": wall - 60}, mail={"mailed": wall - 120})
    sup.inbox.tell(DirectoryFetched(accounts, activity))
    time.sleep(FLEET_COALESCE * 2)
    sup.turn()  # the answer is drained; the tick it asks for waits out the coalescing
    sup.turn()
    assert sorted(watches.started) == ["mailed", "mine"]
    assert report.reports[-1] == {
        "mine": WatchStatus("watching", "hot"),
        "mailed": WatchStatus("watching", "hot"),
        "theirs": WatchStatus("idle", "warm"),
    }
