"""A worker joins a fleet through a real Redis (leases and heartbeats): it parks sessions
for the accounts the other worker is about to give back, before that worker gives them
back, and once a lease is its own only activates the parked session (IDLE). No account
is ever held by both, and the hand-over needs no login after the claim.

Both supervisors run in this thread, turn by turn, with fakes for the mail side (no
database, no mail server): what is under test is the fleet's coordination."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from infrastructure.redis.lease import RedisLease
from infrastructure.redis.registry import RedisFleet
from tests.unit.workers import fakes
from workers import supervisor
from workers.account_info import AccountInfo
from workers.directory import AccountDirectory
from workers.metrics import WorkerMetrics
from workers.news import DirectoryFetched, Inbox, SignalReceived
from workers.parking import ParkedSessions
from workers.policies.watch_stops import StopReason
from workers.supervisor import Supervisor
from workers.supervisor_settings import SupervisorSettings
from workers.watch_owner import WatchOwner

TTL = 10.0
UNREAD: Any = object()  # the directory reads only through the (fake) reader
TICK = 0.2
ACCOUNTS = [f"acct-{i:02d}" for i in range(40)]


def worker(client: redis.Redis, prefix: str, worker_id: str) -> tuple[Supervisor, fakes.Watches]:
    lease = RedisLease(client, TTL, prefix + "lease:", holder=worker_id)
    watches = fakes.Watches()
    parking = ParkedSessions(
        worker_id, lease, ttl=TTL, capacity=1000, login_rate=watches.login_rate
    )
    sup = Supervisor(
        SupervisorSettings(worker_id=worker_id, lease_ttl=TTL, fleet_tick=TICK),
        inbox=Inbox(),
        registry=RedisFleet(client, worker_id, TTL, prefix=prefix + "worker:"),
        owner=WatchOwner(lease, watches, parking, WorkerMetrics(), ttl=TTL),
        directory=AccountDirectory(UNREAD, UNREAD),
        reader=fakes.Reader(),
        ingest=fakes.Ingest(),
        poller=fakes.Polls(),
        status=fakes.Report(),
        metrics=WorkerMetrics(),
    )
    watches.inbox = sup.inbox  # a stopped watch's end is news, as from the real manager
    infos = {a: AccountInfo(a, "t1", "u1", "private", "imap.example") for a in ACCOUNTS}
    sup.inbox.tell(DirectoryFetched(infos))
    sup.inbox.tell(SignalReceived(fakes.user_active("t1", "u1")))  # every account hot
    return sup, watches


def held(sup: Supervisor) -> frozenset[str]:
    return sup.owner.keeper.held_accounts()


def released(watches: fakes.Watches) -> set[str]:
    return {a for a, reason in watches.stopped if reason == StopReason.RELEASED}


@pytest.mark.parametrize("slow", [False, True], ids=["claims at once", "a few claims a turn"])
def test_a_newcomer_parks_what_it_will_get_before_it_is_given_and_then_only_idles(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch, slow: bool
) -> None:
    first, first_watches = worker(client, prefix, "w1")
    deadline = time.monotonic() + 10
    while len(held(first)) < len(ACCOUNTS) and time.monotonic() < deadline:
        first.turn()
        time.sleep(0.01)
    assert held(first) == set(ACCOUNTS)  # alone, it watches everything

    newcomer, new_watches = worker(client, prefix, "w2")
    if slow:
        # A loaded lease backend: a claim takes 10 ms, and a tick claims for 25 ms, so
        # what is given back waits a few turns for its claim: its parked session stays.
        monkeypatch.setattr(supervisor, "CLAIM_BUDGET", 0.025)
        acquire = newcomer.owner.lease.acquire

        def slow_acquire(key: str) -> str | None:
            time.sleep(0.01)
            return acquire(key)

        monkeypatch.setattr(newcomer.owner.lease, "acquire", slow_acquire)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        newcomer.turn()
        parked_so_far = set(new_watches.parked)
        first.turn()
        # Whatever the first worker gave back, the newcomer had parked already.
        assert released(first_watches) <= parked_so_far
        assert not held(first) & held(newcomer), "an account held by both"
        if len(held(newcomer)) == len(ACCOUNTS) // 2 and len(held(first)) == len(ACCOUNTS) // 2:
            break
        time.sleep(0.01)
    assert len(held(newcomer)) == len(held(first)) == len(ACCOUNTS) // 2
    assert released(first_watches) == held(newcomer)
    # The hand-over only activated parked sessions: no login after the claim.
    assert new_watches.stopped == []
    assert new_watches.started == []
    assert set(new_watches.parked) == held(newcomer)
    assert set(new_watches.activated) == held(newcomer)
