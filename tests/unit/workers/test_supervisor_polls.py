"""The supervisor starts no more polls than the poller can run: the backlog waits in the
schedule, where who polls each account is decided when its poll starts. Found in the
10,000-account fleet: a worker that started alone queued a poll of every account in the
poller; as the others joined, it still ran the ones that had become theirs, and every
poll queued for longer than the poll deadline failed as a timeout the moment it ran
(thousands at once, the deadline having run from the queueing). A hot account whose
lease another worker holds is that worker's to poll. Fakes only."""

from __future__ import annotations

import threading
import time

from application.mail.sync_outcome import SyncOutcome
from infrastructure.in_process.lease import InProcessLease
from tests.unit.workers import fakes
from tests.unit.workers.test_supervisor_leases import TTL, fake_supervisor, info
from workers.news import DirectoryFetched, PollDone, SignalReceived
from workers.policies import fleet
from workers.poll import Poller
from workers.supervisor import CHORES_INTERVAL, FLEET_COALESCE, Supervisor
from workers.supervisor_settings import SupervisorSettings

ACCOUNTS = [f"acct-{i}" for i in range(40)]


def world(
    registry: fakes.Registry, polls: fakes.Polls, lease: InProcessLease | None = None
) -> Supervisor:
    sup = fake_supervisor(
        SupervisorSettings(worker_id="w1", lease_ttl=TTL),
        lease=lease,
        registry=registry,
        poller=polls,
    )
    sup.turn()  # the first fleet tick: the live workers are known
    sup.inbox.tell(DirectoryFetched({a: info(a) for a in ACCOUNTS}))
    sup.turn()
    now = time.time()
    for account_id in ACCOUNTS:  # every first poll due now
        sup.polls.schedule(account_id, now)
    return sup


def next_turn(sup: Supervisor) -> None:
    time.sleep(CHORES_INTERVAL * 2)
    sup.turn()


def test_a_backlog_of_due_polls_starts_as_slots_free_up() -> None:
    polls = fakes.Polls()
    polls.slots = 3
    sup = world(fakes.Registry("w1"), polls)
    next_turn(sup)
    assert len(polls.submitted) == 3
    waiting = [a for a in ACCOUNTS if a not in polls.submitted]
    assert all((sup.polls.due_at(a) or 0) <= time.time() for a in waiting)  # still due
    assert sup._full_sleep_time(time.monotonic()) > CHORES_INTERVAL  # no spinning on them

    polls.slots = 5  # two polls ended
    sup.inbox.tell(PollDone(SyncOutcome(polls.submitted[0])))
    sup.inbox.tell(PollDone(SyncOutcome(polls.submitted[1])))
    next_turn(sup)
    assert len(polls.submitted) == 5
    assert len(set(polls.submitted)) == 5


def test_a_waiting_poll_that_became_another_workers_is_not_started() -> None:
    registry = fakes.Registry("w1")
    polls = fakes.Polls()
    polls.slots = 0  # every slot busy while the accounts come due
    sup = world(registry, polls)
    next_turn(sup)
    assert polls.submitted == []

    registry.others = {"w2": 0}  # a second worker joins
    sup._next_fleet = 0.0  # the next turn is a fleet tick
    polls.slots = len(ACCOUNTS)
    next_turn(sup)
    mine = [a for a in ACCOUNTS if fleet.poll_owner(a, ["w1", "w2"]) == "w1"]
    assert 0 < len(mine) < len(ACCOUNTS)
    assert sorted(polls.submitted) == sorted(mine)


def test_a_hot_account_another_worker_holds_is_its_holders_to_poll() -> None:
    lease = InProcessLease(TTL, holder="w1")
    polls = fakes.Polls()
    polls.slots = 0
    sup = world(fakes.Registry("w1", others={"w2": 1}), polls, lease)
    held = [a for a in ACCOUNTS if fleet.poll_owner(a, ["w1", "w2"]) == "w1"][:3]
    for account_id in held:
        assert lease.acquire(account_id) is not None  # w2's watches

    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))  # all of them hot
    time.sleep(FLEET_COALESCE * 2)
    sup.turn()
    polls.slots = len(ACCOUNTS)
    next_turn(sup)
    assert not set(held) & set(polls.submitted)
    assert all((sup.polls.due_at(a) or 0) > time.time() + 60 for a in held)  # passed over


def test_the_deadline_of_a_queued_poll_runs_from_its_start() -> None:
    release = threading.Event()
    deadlines: dict[str, float] = {}
    started: dict[str, float] = {}

    def sync(account_id: str, deadline: float) -> SyncOutcome:
        started[account_id] = time.monotonic()
        deadlines[account_id] = deadline
        if account_id == "slow":
            release.wait(5)
        return SyncOutcome(account_id)

    poller = Poller(sync, concurrency=1, deadline_seconds=10.0)
    done = threading.Event()
    assert poller.free_slots() == 1
    assert poller.submit("slow", lambda _: None)
    assert poller.free_slots() == 0
    assert poller.submit("queued", lambda _: done.set())
    time.sleep(0.3)
    release.set()
    assert done.wait(5)
    assert deadlines["queued"] - started["queued"] > 9.9  # a whole deadline, not 9.7 s
    assert poller.free_slots() == 1
    poller.close()
