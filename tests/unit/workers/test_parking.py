"""The record of parked sessions for a failover: parked for the orphans this worker will
claim, handed on once claimed, closed when no longer expected. It never touches a watch:
it answers what to park and what to close."""

from __future__ import annotations

from infrastructure.in_process.lease import InProcessLease
from workers.parking import ParkedSessions, Parking

TTL = 90.0


def setup() -> ParkedSessions:
    lease = InProcessLease(TTL, holder="dead")  # the dead worker's leases, read by w1
    for account in ("a", "b"):
        assert lease.acquire(account)
    return ParkedSessions("w1", lease, ttl=TTL, capacity=100)


def test_orphans_are_parked_and_handed_over_when_claimed() -> None:
    parking = setup()
    live = {"w1": 0, "dead": 2}
    plan = parking.plan(live, {"a", "b"}, set(), {"a": TTL * 0.4, "b": TTL * 0.4})
    assert plan == Parking(park=("a", "b"), close=())
    for account in plan.park:
        parking.parked(account)
    assert parking.plan(live, {"a", "b"}, set(), {"a": TTL * 0.4, "b": TTL * 0.4}) == Parking(
        (), ()
    )
    assert parking.take("a")  # the lease is ours now
    assert not parking.take("a")  # handed over once
    assert "a" not in parking and "b" in parking


def test_leases_renewed_again_close_the_parked_sessions() -> None:
    parking = setup()
    live = {"w1": 0, "dead": 2}
    for account in parking.plan(live, {"a", "b"}, set(), {"a": TTL * 0.4, "b": TTL * 0.4}).park:
        parking.parked(account)
    plan = parking.plan(live, {"a", "b"}, set(), {"a": TTL, "b": TTL})  # its holder lives
    assert plan == Parking(park=(), close=("a", "b"))


def test_no_orphans_no_sessions() -> None:
    parking = setup()
    plan = parking.plan({"w1": 0, "dead": 2}, {"a", "b"}, set(), {"a": TTL, "b": TTL * 0.7})
    assert plan == Parking((), ())
