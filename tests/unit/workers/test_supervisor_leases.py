"""A lease held means a watch: a watch that stops quietly (e.g. a parked session closed
as unclaimed) while its lease is ours is started again. Found as a failover where a
dozen accounts stayed unwatched under leases the survivor kept renewing: the lease was
won while the parked session was closing, so the start saw a watch and started nothing,
and the closing one's quiet stop started nothing either.

Unit tests with fakes for every collaborator (no database, no mail server)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from infrastructure.in_process.lease import InProcessLease
from tests.unit.workers import fakes
from workers import supervisor
from workers.directory import AccountDirectory, AccountInfo
from workers.metrics import WorkerMetrics
from workers.news import DirectoryFetched, Inbox, SignalReceived, WatchStopped
from workers.parking import ParkedSessions
from workers.policies.watch_report import WatchStatus
from workers.policies.watch_stops import StopReason
from workers.supervisor import FLEET_COALESCE, Supervisor, SupervisorSettings
from workers.watch_owner import WatchOwner

TTL = 30.0


def owner(watches: fakes.Watches, lease: InProcessLease | None = None) -> WatchOwner:
    lease = lease or InProcessLease(TTL, holder="w1")
    parking = ParkedSessions("w1", lease, ttl=TTL, capacity=100)
    return WatchOwner(lease, watches, parking, WorkerMetrics(), ttl=TTL)


def held(owner: WatchOwner, account_id: str) -> None:
    claim = owner.keeper.claim(account_id)
    assert claim is not None and owner.keeper.on_acquired(claim, "tok", sent_at=0.0)


def test_a_quiet_stop_under_a_lease_still_ours_starts_the_watch_again() -> None:
    watches = fakes.Watches()
    sup = owner(watches)
    held(sup, "acct")
    sup.stopped(WatchStopped("acct", StopReason.UNCLAIMED), 0.0)
    assert watches.started == ["acct"]


def test_a_quiet_stop_after_the_lease_went_starts_nothing() -> None:
    watches = fakes.Watches()
    sup = owner(watches)
    sup.stopped(WatchStopped("acct", StopReason.RELEASED), 0.0)  # not held
    held(sup, "other")
    watches.watching_now.add("other")  # held and watched already
    sup.stopped(WatchStopped("other", StopReason.STALE), 0.0)
    assert watches.started == []


def info(account_id: str) -> AccountInfo:
    return AccountInfo(account_id, "t1", "u1", "private", "imap.example")


@pytest.fixture
def world() -> tuple[Supervisor, fakes.Watches, fakes.Report]:
    watches, report = fakes.Watches(), fakes.Report()
    app: Any = object()  # the directory only reads through the (fake) reader
    directory = AccountDirectory(app)
    sup = Supervisor(
        SupervisorSettings(worker_id="w1", lease_ttl=TTL),
        inbox=Inbox(),
        registry=fakes.Registry("w1"),
        owner=owner(watches),
        directory=directory,
        reader=fakes.Reader(),
        ingest=fakes.Ingest(),
        poller=fakes.Polls(),
        status=report,
        metrics=WorkerMetrics(),
    )
    return sup, watches, report


def test_a_user_active_claims_and_watches_the_users_accounts_and_reports_them(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    sup, watches, report = world
    sup.inbox.tell(DirectoryFetched({"a": info("a"), "b": info("b")}))
    sup.turn()
    assert watches.started == []  # nobody active yet: both warm, polled by this worker
    assert report.reports[-1] == {
        "a": WatchStatus("idle", "warm"),
        "b": WatchStatus("idle", "warm"),
    }
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
    time.sleep(FLEET_COALESCE * 2)  # a signal's fleet tick waits out the coalescing
    sup.turn()
    assert sorted(watches.started) == ["a", "b"]
    assert report.reports[-1] == {
        "a": WatchStatus("watching", "hot"),
        "b": WatchStatus("watching", "hot"),
    }


def test_a_failed_watch_backs_off_and_is_reported_so(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    sup, watches, report = world
    sup.inbox.tell(DirectoryFetched({"a": info("a")}))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
    sup.turn()
    assert watches.started == ["a"]
    watches.watching_now.discard("a")
    sup.inbox.tell(WatchStopped("a", StopReason.CLOSED, lived=1.0))
    time.sleep(FLEET_COALESCE * 2)
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))  # a fleet tick now
    sup.turn()
    assert watches.started == ["a"]  # not at once: after backoff
    assert report.reports[-1] == {"a": WatchStatus("backoff", "hot")}


def test_a_long_claim_round_gives_way_to_the_renewals_and_goes_on_next_turn(
    world: tuple[Supervisor, fakes.Watches, fakes.Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, watches, _ = world
    monkeypatch.setattr(supervisor, "CLAIM_BUDGET", 0.05)
    acquire = sup.owner.lease.acquire

    def slow(key: str) -> str | None:  # a loaded lease backend: a round trip takes 10 ms
        time.sleep(0.01)
        return acquire(key)

    monkeypatch.setattr(sup.owner.lease, "acquire", slow)
    accounts = {f"a{i:02d}": info(f"a{i:02d}") for i in range(30)}
    sup.inbox.tell(DirectoryFetched(accounts))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
    sup.turn()
    first = len(watches.started)
    assert 1 <= first <= 10, first  # cut short after the budget
    for _ in range(20):
        if len(watches.started) == 30:
            break
        time.sleep(FLEET_COALESCE * 1.5)  # the next fleet tick is due at once
        sup.turn()
    assert sorted(watches.started) == sorted(accounts)
