"""The record of parked sessions for a failover: parked for the orphans this worker will
claim, once their logins are due by its measured login rate; handed on once claimed,
closed when no longer expected. It never touches a watch: it answers what to park and
what to close, and when to ask again."""

from __future__ import annotations

from infrastructure.in_process.lease import InProcessLease
from workers.parking import HANDOVER_LOOK, ParkedSessions, Parking
from workers.policies import failover

TTL = 90.0
NOW = 500.0
LIVE = {"w1": 0, "dead": 2}
HOT = {"a", "b"}


def setup(rate: float | None = None) -> ParkedSessions:
    lease = InProcessLease(TTL, holder="dead")  # the dead worker's leases, read by w1
    for account in ("a", "b"):
        assert lease.acquire(account)
    return ParkedSessions("w1", lease, ttl=TTL, capacity=100, login_rate=lambda: rate)


def test_orphans_are_parked_and_handed_over_when_claimed() -> None:
    parking = setup()
    plan = parking.plan(NOW, LIVE, HOT, set(), {"a": TTL * 0.4, "b": TTL * 0.4})
    assert plan == Parking(park=("a", "b"), close=())
    for account in plan.park:
        parking.parked(account)
    assert parking.plan(NOW, LIVE, HOT, set(), {"a": TTL * 0.4, "b": TTL * 0.4}) == Parking((), ())
    assert parking.take("a")  # the lease is ours now
    assert not parking.take("a")  # handed over once
    assert "a" not in parking and "b" in parking


def test_leases_renewed_again_close_the_parked_sessions() -> None:
    parking = setup()
    for account in parking.plan(NOW, LIVE, HOT, set(), {"a": TTL * 0.4, "b": TTL * 0.4}).park:
        parking.parked(account)
    plan = parking.plan(NOW, LIVE, HOT, set(), {"a": TTL, "b": TTL})  # its holder lives
    assert plan == Parking(park=(), close=("a", "b"))


def test_no_orphans_no_sessions() -> None:
    parking = setup()
    plan = parking.plan(NOW, LIVE, HOT, set(), {"a": TTL, "b": TTL * 0.7})
    assert plan == Parking((), ())


def test_a_fast_machine_waits_and_says_when_to_start() -> None:
    parking = setup(rate=100.0)  # two logins: 20 ms, far less than the 36 s left
    taken = {"a": TTL * 0.4, "b": TTL * 0.5}
    plan = parking.plan(NOW, LIVE, HOT, set(), taken)
    start = NOW + TTL * 0.4 - 0.01 * (1 + failover.LEAD_SLACK) - failover.LEAD_MARGIN
    assert plan.park == () and plan.close == ()
    assert plan.look_again_at is not None and abs(plan.look_again_at - start) < 1e-9
    # Asked again at that time (the leases 36 s - 34 s further down), it parks them,
    # the earliest lapse first.
    later = {a: left - (start - NOW) for a, left in taken.items()}
    assert parking.plan(start, LIVE, HOT, set(), later) == Parking(park=("a", "b"), close=())


def test_a_slow_machine_starts_as_soon_as_the_holder_is_presumed_dead() -> None:
    parking = setup(rate=0.05)  # two logins take 40 s: more than the 36 s left
    plan = parking.plan(NOW, LIVE, HOT, set(), {"a": TTL * 0.4, "b": TTL * 0.4})
    assert plan == Parking(park=("a", "b"), close=())


def test_a_lease_renewed_while_its_logins_wait_leaves_nothing_to_close() -> None:
    parking = setup(rate=100.0)
    assert parking.plan(NOW, LIVE, HOT, set(), {"a": TTL * 0.5, "b": TTL * 0.5}).park == ()
    assert parking.plan(NOW + 1, LIVE, HOT, set(), {"a": TTL, "b": TTL}) == Parking((), ())


# --- a hand-over: a worker short of its share parks what the others will give it ---


def joining(accounts: int = 20) -> tuple[ParkedSessions, set[str], dict[str, float]]:
    """w2 joins beside w1, which holds every one of ``accounts`` hot accounts."""
    lease = InProcessLease(TTL, holder="w1")
    hot = {f"h{i:02d}" for i in range(accounts)}
    for account in hot:
        assert lease.acquire(account)
    parking = ParkedSessions("w2", lease, ttl=TTL, capacity=100, login_rate=lambda: 100.0)
    return parking, hot, dict.fromkeys(hot, TTL)  # w1 renews: far from lapsing


def test_a_newcomer_parks_at_once_what_the_holder_will_give_back() -> None:
    parking, hot, taken = joining()
    plan = parking.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken)
    assert plan.park == () and plan.close == ()  # nothing of a failover
    assert len(plan.handover) == 10 and set(plan.handover) <= hot  # its share, at once
    assert plan.look_again_at == NOW + HANDOVER_LOOK  # to claim them once given back
    for account in plan.handover:
        parking.parked(account)
    again = parking.plan(NOW + 1, {"w1": 20, "w2": 0}, hot, set(), taken)
    assert again.handover == () and again.close == ()  # parked once


def blind(me: str, rate: float | None) -> ParkedSessions:
    """Parking whose lease backend holds nothing: it can know holders only if told."""
    return ParkedSessions(me, InProcessLease(TTL), ttl=TTL, capacity=100, login_rate=lambda: rate)


def test_holders_read_with_the_leases_are_not_read_again() -> None:
    parking, hot, taken = joining()
    asked = parking.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken).handover
    unread = blind("w2", 1.0)  # its lease backend knows of no holder
    known = dict.fromkeys(hot, "w1")
    plan = unread.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken, holders=known)
    assert plan.handover == asked and len(asked) == 10
    # A dead holder's lease from the same read: its orphan is parked as from a fresh read.
    dying = setup()
    orphans = {"a": TTL * 0.4, "b": TTL * 0.4}
    both = dict.fromkeys(orphans, "dead")
    assert blind("w1", None).plan(NOW, LIVE, HOT, set(), orphans, holders=both) == dying.plan(
        NOW, LIVE, HOT, set(), orphans
    )


def test_a_newcomer_with_its_share_closes_what_was_not_given() -> None:
    parking, hot, taken = joining()
    for account in parking.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken).handover:
        parking.parked(account)
    given = set(sorted(hot)[:10])  # the holder gave back others than predicted
    plan = parking.plan(NOW + 1, {"w1": 10, "w2": 10}, hot, given, taken)
    assert plan.handover == () and plan.look_again_at is None
    assert set(plan.close) == {a for a in hot if a in parking}


def test_parked_sessions_stay_while_their_accounts_are_free_and_hot() -> None:
    # The holder gave them back; w2 claims for a limited time a tick (and may be given
    # them only by a later plan): until then their sessions stay.
    parking, hot, taken = joining()
    handed = parking.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken).handover
    for account in handed:
        parking.parked(account)
    claimed, waiting = set(handed[:4]), set(handed[4:])
    for account in claimed:
        assert parking.take(account)
    still_held = {a: left for a, left in taken.items() if a not in handed}
    plan = parking.plan(NOW + 1, {"w1": 10, "w2": 4}, hot, claimed, still_held)
    assert plan.close == ()
    # Another worker won them (taken again; w2 has its share by now), or they are no
    # longer hot: closed.
    share = claimed | set(sorted(hot - set(handed))[:6])
    plan = parking.plan(NOW + 2, {"w1": 10, "w2": 10}, hot, share, taken)
    assert set(plan.close) == waiting
    plan = parking.plan(NOW + 2, {"w1": 10, "w2": 4}, hot - waiting, claimed, still_held)
    assert set(plan.close) == waiting


def test_while_short_what_was_parked_stays_though_the_prediction_shifts() -> None:
    # A third worker joins too: the holder's give-back is now shared, and part of what
    # w2 parked falls to w3 by the new prediction. w2 is still short: nothing closes
    # (the holders' counts and give-backs shift tick to tick while a hand-over runs).
    parking, hot, taken = joining()
    first = parking.plan(NOW, {"w1": 20, "w2": 0}, hot, set(), taken).handover
    for account in first:
        parking.parked(account)
    shifted = parking.plan(NOW + 1, {"w1": 20, "w2": 0, "w3": 0}, hot, set(), taken)
    assert shifted.close == ()
    # With its share (7 of 20 among three), the ones still held by w1 are closed.
    mine = set(sorted(hot - set(first))[:7])
    still = {a: left for a, left in taken.items() if a not in mine}
    done = parking.plan(NOW + 2, {"w1": 13, "w2": 7, "w3": 0}, hot, mine, still)
    assert set(done.close) == set(first) - mine
