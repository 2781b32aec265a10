"""A lease held means a watch: a watch that stops quietly (e.g. a parked session closed
as unclaimed) while its lease is ours is started again. Found as a failover where a
dozen accounts stayed unwatched under leases the survivor kept renewing: the lease was
won while the parked session was closing, so the start saw a watch and started nothing,
and the closing one's quiet stop started nothing either.

Unit tests with fakes for every collaborator (no database, no mail server)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from application.leases import LeaseBackendUnavailable
from infrastructure.in_process.lease import InProcessLease
from tests.unit.workers import fakes
from workers import supervisor, watch_owner
from workers.account_info import AccountInfo
from workers.directory import AccountDirectory
from workers.metrics import WorkerMetrics
from workers.news import DirectoryFetched, Inbox, SignalReceived, WatchStopped
from workers.parking import ParkedSessions
from workers.policies import failover
from workers.policies.watch_report import WatchStatus
from workers.policies.watch_stops import StopReason
from workers.supervisor import FLEET_COALESCE, Supervisor
from workers.supervisor_settings import SupervisorSettings
from workers.watch_owner import WatchOwner

TTL = 30.0
UNREAD: Any = object()  # the directory reads only through the (fake) reader


def owner(
    watches: fakes.Watches,
    lease: InProcessLease | None = None,
    login_rate: Callable[[], float | None] = lambda: None,
) -> WatchOwner:
    lease = lease or InProcessLease(TTL, holder="w1")
    parking = ParkedSessions("w1", lease, ttl=TTL, capacity=100, login_rate=login_rate)
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


def fake_supervisor(
    settings: SupervisorSettings,
    *,
    watches: fakes.Watches | None = None,
    lease: InProcessLease | None = None,
    registry: fakes.Registry | None = None,
    poller: fakes.Polls | None = None,
    status: fakes.Report | None = None,
) -> Supervisor:
    """A supervisor on fakes for every collaborator (its directory reads only through the
    fake reader)."""
    return Supervisor(
        settings,
        inbox=Inbox(),
        registry=registry if registry is not None else fakes.Registry(settings.worker_id),
        owner=owner(watches if watches is not None else fakes.Watches(), lease),
        directory=AccountDirectory(UNREAD, UNREAD),
        reader=fakes.Reader(),
        ingest=fakes.Ingest(),
        poller=poller if poller is not None else fakes.Polls(),
        status=status if status is not None else fakes.Report(),
        metrics=WorkerMetrics(),
    )


@pytest.fixture
def world() -> tuple[Supervisor, fakes.Watches, fakes.Report]:
    watches, report = fakes.Watches(), fakes.Report()
    sup = fake_supervisor(
        SupervisorSettings(worker_id="w1", lease_ttl=TTL), watches=watches, status=report
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
    monkeypatch.setattr(supervisor, "CLAIM_BATCH", 1)
    acquire_many = sup.owner.lease.acquire_many

    def slow(keys: Iterable[str]) -> dict[str, str | None]:  # a round trip takes 10 ms
        time.sleep(0.01)
        return acquire_many(keys)

    monkeypatch.setattr(sup.owner.lease, "acquire_many", slow)
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


def test_claims_go_a_batch_to_a_round_trip(
    world: tuple[Supervisor, fakes.Watches, fakes.Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, watches, _ = world
    monkeypatch.setattr(supervisor, "CLAIM_BATCH", 10)
    acquire_many = sup.owner.lease.acquire_many
    round_trips: list[list[str]] = []

    def counted(keys: Iterable[str]) -> dict[str, str | None]:
        round_trips.append(list(keys))
        return acquire_many(round_trips[-1])

    monkeypatch.setattr(sup.owner.lease, "acquire_many", counted)
    accounts = {f"a{i:02d}": info(f"a{i:02d}") for i in range(25)}
    sup.inbox.tell(DirectoryFetched(accounts))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
    sup.turn()
    assert [len(keys) for keys in round_trips] == [10, 10, 5]
    assert sorted(watches.started) == sorted(accounts)


def test_a_claim_taken_by_another_worker_meanwhile_starts_nothing(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    sup, watches, _ = world
    other = sup.owner.lease.acquire("b")  # another holder, between the plan and the claim
    assert other is not None
    assert sup.owner.claim_many(["a", "b"]) == ["a"]
    assert watches.started == ["a"]
    assert sup.owner.holds("a") and not sup.owner.holds("b")
    assert sup.owner.claim_many(["a"]) == []  # held already: nothing to acquire


# --- a failover: the dead worker's accounts are logged in to when the login rate says ---

DEAD_ACCOUNTS = [f"d{i}" for i in range(20)]
OWN_ACCOUNTS = [f"o{i}" for i in range(20)]
LEFT = 2.5  # seconds left on the dead worker's leases when the survivor first looks


def survivor(rate: float | None, left: float = LEFT) -> tuple[Supervisor, fakes.Watches]:
    """A survivor (w1) with its share (20 hot accounts of its own, being watched)
    beside a dead worker whose heartbeat is still live and whose leases on 20 hot
    accounts have ``left`` seconds left."""
    offset = [left - TTL]  # the dead worker acquired its leases TTL - left ago
    lease = InProcessLease(TTL, lambda: time.monotonic() + offset[0], holder="dead")
    for account in DEAD_ACCOUNTS:
        assert lease.acquire(account)
    offset[0] = 0.0
    watches = fakes.Watches()
    watches.rate = rate
    sup = Supervisor(
        SupervisorSettings(worker_id="w1", lease_ttl=TTL),
        inbox=Inbox(),
        registry=fakes.Registry("w1", others={"dead": len(DEAD_ACCOUNTS)}),
        owner=owner(watches, lease, login_rate=watches.login_rate),
        directory=AccountDirectory(UNREAD, UNREAD),
        reader=fakes.Reader(),
        ingest=fakes.Ingest(),
        poller=fakes.Polls(),
        status=fakes.Report(),
        metrics=WorkerMetrics(),
    )
    sup.inbox.tell(DirectoryFetched({a: info(a) for a in DEAD_ACCOUNTS + OWN_ACCOUNTS}))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))  # all of them hot
    for account in OWN_ACCOUNTS:
        assert sup.owner.claim(account)
    watches.started.clear()
    return sup, watches


def test_a_fast_survivor_logs_in_to_a_dead_workers_accounts_when_its_rate_says() -> None:
    # 1,000 logins a second: 20 take 20 ms; with the margins, start ~2 s before the
    # lapse, ~0.5 s from now — long before the next fleet tick (5 s).
    sup, watches = survivor(rate=1000.0)
    sup.turn()
    assert watches.parked == [] and watches.started == []
    start = time.monotonic() + LEFT - 0.02 * (1 + failover.LEAD_SLACK) - failover.LEAD_MARGIN
    while time.monotonic() < start - 0.1:
        sup.turn()
        assert watches.parked == []  # not before its time
        time.sleep(0.02)
    deadline = start + 1.5  # before the lapse (LEFT): then they would be claimed outright
    while not watches.parked and time.monotonic() < deadline:
        sup.turn()
        time.sleep(0.02)
    assert sorted(watches.parked) == sorted(DEAD_ACCOUNTS)  # a tick ran at the start
    assert watches.started == []  # the leases are not ours yet


@pytest.mark.parametrize("rate", [None, 5.0], ids=["no rate measured yet", "a slow machine"])
def test_a_slow_or_unmeasured_survivor_logs_in_at_once(rate: float | None) -> None:
    # 5 logins a second: 20 take 4 s, more than the 2.5 s left.
    sup, watches = survivor(rate)
    sup.turn()
    assert sorted(watches.parked) == sorted(DEAD_ACCOUNTS)


def test_a_slow_survivor_looks_again_the_moment_a_holder_can_be_presumed_dead() -> None:
    # One login a second: 20 take 20 s, more than the 17 s to the lapse. The leases are
    # 0.3 s above the point where their holder is presumed dead; the next regular tick
    # is 5 s away. A tick runs at that point.
    threshold = TTL * failover.ORPHANED_BELOW
    sup, watches = survivor(rate=1.0, left=threshold + 0.3)
    sup.turn()
    assert watches.parked == []  # not yet presumed dead
    deadline = time.monotonic() + 3.0  # the next regular tick is 5 s away
    while not watches.parked and time.monotonic() < deadline:
        sup.turn()
        time.sleep(0.02)
    assert sorted(watches.parked) == sorted(DEAD_ACCOUNTS)


def test_a_fast_survivor_waits_for_its_regular_tick_to_see_a_holder_dead() -> None:
    # 1,000 logins a second: seeing it up to a tick later still leaves time for all.
    threshold = TTL * failover.ORPHANED_BELOW
    sup, watches = survivor(rate=1000.0, left=threshold + 0.3)
    sup.turn()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        sup.turn()
        time.sleep(0.02)
    assert watches.parked == []


# --- a lease backend that stops answering: logged once per outage, not per retry ---


class FlakyLease(InProcessLease):
    def __init__(self) -> None:
        super().__init__(TTL, holder="w1")
        self.down = False

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        if self.down:
            raise LeaseBackendUnavailable("lease backend down") from ConnectionError("refused")
        return super().renew_many(items)


def test_failed_renewals_are_logged_once_per_outage_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = FlakyLease()
    sup = owner(fakes.Watches(), lease)
    for account in ("a", "b"):
        assert sup.claim(account)
    caplog.set_level(logging.INFO, logger="tidings.supervisor")
    lease.down = True
    now = time.monotonic() + TTL / 3  # the first renewal is due
    for step in range(5):  # five renewal attempts, each due (retries come sooner)
        sup.renew(now + step * TTL / 9)
    failed = [r for r in caplog.records if r.message.startswith("lease.renew_failed")]
    assert [r.message for r in failed] == ["lease.renew_failed leases=2 error=ConnectionError"]
    assert failed[0].levelno == logging.WARNING
    assert sup.metrics.lease_renewals_failed._value.get() == 5
    lease.down = False
    sup.renew(now + 5 * TTL / 9)
    sup.renew(now + 5 * TTL / 9 + 1)  # answered, not due: nothing more to say
    recovered = [r.message for r in caplog.records if "lease.renew_recovered" in r.message]
    assert recovered == [f"lease.renew_recovered leases=2 after={5 * TTL / 9:.1f}s"]
    lease.down = True  # a second outage is a second episode
    sup.renew(now + 5 * TTL / 9 + TTL / 3)
    failed = [r for r in caplog.records if r.message.startswith("lease.renew_failed")]
    assert len(failed) == 2


# --- the directory is read once a fleet tick, not on every tick a signal brings forward ---


def test_ticks_brought_forward_do_not_read_the_directory_again(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    sup, _, report = world
    sup.settings = dataclasses.replace(sup.settings, fleet_tick=1.0)
    reader = sup.reader
    assert isinstance(reader, fakes.Reader)
    sup.inbox.tell(DirectoryFetched({"a": info("a")}))
    first = time.monotonic()
    sup.turn()  # the first tick: a refresh asked
    assert reader.refreshes == 1
    ticks = len(report.reports)
    for _ in range(3):  # a burst of user-actives: each brings a fleet tick forward
        time.sleep(FLEET_COALESCE * 2)
        sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
        sup.turn()
    assert len(report.reports) == ticks + 3  # three more fleet ticks ran...
    assert reader.refreshes == 1  # ...with the directory they had
    assert time.monotonic() - first < 1.0  # all within one fleet tick
    deadline = time.monotonic() + 3.0
    while reader.refreshes == 1 and time.monotonic() < deadline:
        time.sleep(0.02)
        sup.turn()  # the next regular tick reads it again: it is a fleet tick old
    assert reader.refreshes == 2
    assert time.monotonic() - first >= 1.0


def test_the_heartbeat_after_a_ticks_claims_carries_the_new_count(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    sup, watches, _ = world
    registry = sup.registry
    assert isinstance(registry, fakes.Registry)
    sup.inbox.tell(DirectoryFetched({"a": info("a"), "b": info("b")}))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))
    sup.turn()
    assert sorted(watches.started) == ["a", "b"]
    assert registry.held == 2  # not the 0 sent before this tick's claims


def test_no_heartbeat_before_the_first_directory_answer(
    world: tuple[Supervisor, fakes.Watches, fakes.Report],
) -> None:
    # The heartbeat makes the others give this worker its share: it must be able to park
    # sessions for what they give (it needs the directory for that) before they do.
    sup, _, _ = world
    registry = sup.registry
    assert isinstance(registry, fakes.Registry)
    sup.turn()
    assert registry.heartbeats == 0
    sup.inbox.tell(DirectoryFetched(None))  # a failed read is no answer
    time.sleep(FLEET_COALESCE * 2)
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))  # a fleet tick now
    sup.turn()
    assert len(sup.status.reports) == 2  # type: ignore[attr-defined]  # two ticks ran
    assert registry.heartbeats == 0
    sup.inbox.tell(DirectoryFetched({"a": info("a")}))
    time.sleep(FLEET_COALESCE * 2)
    sup.turn()  # the answer brings a fleet tick forward
    assert registry.heartbeats >= 1


def test_a_released_lease_is_given_back_only_once_its_watch_has_ended() -> None:
    """Given back while the session still idled, the next holder's IDLE could reach the
    server first: one mailbox in IDLE twice at once (seen once in a 10,000-account join)."""
    watches = fakes.Watches()
    lease = InProcessLease(TTL, holder="w1")
    sup = owner(watches, lease)
    assert sup.claim("acct")
    sup.stop("acct", StopReason.RELEASED)
    assert lease.acquire("acct") is None, "given back while its watch still ran"
    assert not sup.claim("acct"), "claimed again while the old watch was ending"
    sup.stopped(WatchStopped("acct", StopReason.RELEASED), 0.0)
    assert lease.acquire("acct") is not None


def test_a_watch_that_never_reports_its_end_holds_its_lease_only_so_long() -> None:
    watches = fakes.Watches()
    lease = InProcessLease(TTL, holder="w1")
    sup = owner(watches, lease)
    assert sup.claim("acct")
    sup.stop("acct", StopReason.RELEASED)
    sup.renew(time.monotonic() + watch_owner.HANDOVER_WAIT - 1.0)
    assert lease.acquire("acct") is None
    assert sup.next_wakeup() is not None
    sup.renew(time.monotonic() + watch_owner.HANDOVER_WAIT + 0.1)
    assert lease.acquire("acct") is not None


def test_a_stop_without_a_watch_gives_the_lease_back_at_once() -> None:
    watches = fakes.Watches()
    lease = InProcessLease(TTL, holder="w1")
    sup = owner(watches, lease)
    assert sup.claim("acct")
    watches.watching_now.discard("acct")  # its watch ended on its own already
    sup.stop("acct", StopReason.RELEASED)
    assert lease.acquire("acct") is not None


def test_shutdown_gives_back_the_leases_of_watches_still_ending() -> None:
    watches = fakes.Watches()
    lease = InProcessLease(TTL, holder="w1")
    sup = owner(watches, lease)
    assert sup.claim("acct")
    sup.stop("acct", StopReason.RELEASED)
    sup.close()
    assert lease.acquire("acct") is not None
