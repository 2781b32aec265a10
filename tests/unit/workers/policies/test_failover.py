"""Logging in ahead of a failover: which leases are orphaned, which orphans each
survivor prepares (the claims it will make once they lapse, disjoint across survivors),
and when it starts, from its measured login rate."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from workers.policies import failover, fleet

TTL = 90.0
ACCOUNTS = [f"acct-{i}" for i in range(300)]


def test_a_lease_a_renewal_missed_by_more_than_a_ninth_of_its_ttl_is_orphaned() -> None:
    # Live holders renew every ttl/3: their leases keep more than 2/3 of the ttl.
    taken = {"renewed": TTL, "due": TTL * 2 / 3, "late": TTL * 0.57, "missed": TTL * 0.55}
    assert failover.orphaned(taken, TTL) == {"missed"}
    assert failover.orphaned({}, TTL) == set()


LAPSE = 1000.0  # the dead worker's leases all lapse then (one renewal batch)
ORPHANS = 1000


def test_a_fast_machine_starts_its_logins_shortly_before_the_lapse() -> None:
    # 250 logins a second: 1,000 take 4 s; with the slack and margin, 8 s ahead: later
    # than a 20 s ttl's holder is presumed dead, so a late renewal costs no login.
    start = failover.start_logins_at([LAPSE] * ORPHANS, 250.0)
    assert start == pytest.approx(LAPSE - 4.0 * (1 + failover.LEAD_SLACK) - failover.LEAD_MARGIN)
    assert LAPSE - 20.0 * failover.ORPHANED_BELOW < start < LAPSE - 4.0


def test_a_slow_machine_starts_long_before_the_lapse() -> None:
    # 40 logins a second: 1,000 take 25 s, more than a 20 s ttl's lapse leaves: the
    # caller, asking only once the holder is presumed dead, starts at once.
    start = failover.start_logins_at([LAPSE] * ORPHANS, 40.0)
    assert start == pytest.approx(LAPSE - 25.0 * (1 + failover.LEAD_SLACK) - failover.LEAD_MARGIN)
    assert start < LAPSE - 20.0 * failover.ORPHANED_BELOW


def test_no_rate_measured_yet_starts_at_once() -> None:
    assert failover.start_logins_at([LAPSE] * ORPHANS, None) == -math.inf


def test_leases_lapsing_at_different_times_each_have_their_session_by_their_lapse() -> None:
    # Two dead workers: 100 leases lapse at 1000, 900 more at 1010. At 100/s the
    # first 100 need 1 s; all 1,000 need 10 s before 1010: the later ones decide.
    lapses = [LAPSE] * 100 + [LAPSE + 10.0] * 900
    start = failover.start_logins_at(lapses, 100.0)
    lead = 10.0 * (1 + failover.LEAD_SLACK) + failover.LEAD_MARGIN
    assert start == pytest.approx(LAPSE + 10.0 - lead)
    # ...and in any order given, every k-th earliest lapse is met at the rate.
    for k, lapse in enumerate(sorted(lapses), start=1):
        assert start + k / 100.0 <= lapse


def test_no_orphans_nothing_to_prepare() -> None:
    hot = set(ACCOUNTS[:10])
    plan = failover.plan(
        "w1",
        live_workers={"w1": 0, "w2": 10},
        hot=hot,
        mine=set(),
        taken=hot,
        orphans={},
        capacity=100,
    )
    assert plan == set()


def test_a_lone_survivor_prepares_every_orphan_of_the_dead_worker() -> None:
    hot = set(ACCOUNTS[:100])
    mine, theirs = set(ACCOUNTS[:50]), set(ACCOUNTS[50:100])
    plan = failover.plan(
        "w1",
        # The dead worker's heartbeat has not lapsed yet: it still counts as live.
        live_workers={"w1": 50, "dead": 50},
        hot=hot,
        mine=mine,
        taken=theirs,
        orphans=dict.fromkeys(theirs, "dead"),
        capacity=1000,
    )
    assert plan == theirs


def test_orphans_whose_holder_is_unknown_are_still_prepared_by_someone() -> None:
    hot = set(ACCOUNTS[:20])
    taken = set(ACCOUNTS[:20])
    orphans = dict.fromkeys(ACCOUNTS[:20], "")  # tokens of no known shape
    plans = [
        failover.plan(
            w,
            live_workers={"w1": 0, "w2": 0},
            hot=hot,
            mine=set(),
            taken=taken,
            orphans=orphans,
            capacity=1000,
        )
        for w in ("w1", "w2")
    ]
    assert plans[0] | plans[1] == set(ACCOUNTS[:20]) and not plans[0] & plans[1]


def test_the_capacity_bounds_what_is_prepared() -> None:
    theirs = set(ACCOUNTS[:100])
    plan = failover.plan(
        "w1",
        live_workers={"w1": 0, "dead": 100},
        hot=theirs,
        mine=set(),
        taken=theirs,
        orphans=dict.fromkeys(theirs, "dead"),
        capacity=30,
    )
    assert len(plan) == 30


@settings(max_examples=200, deadline=None)
@given(
    survivors=st.integers(min_value=1, max_value=4),
    hot_count=st.integers(min_value=0, max_value=120),
    held_shares=st.lists(st.integers(min_value=0, max_value=40), min_size=5, max_size=5),
    dead_count=st.integers(min_value=1, max_value=2),
    capacity=st.integers(min_value=10, max_value=200),
)
def test_survivors_prepare_disjoint_sets_that_are_their_claims_after_the_lapse(
    survivors: int, hot_count: int, held_shares: list[int], dead_count: int, capacity: int
) -> None:
    workers = [f"w{i}" for i in range(survivors)]
    dead = [f"dead{i}" for i in range(dead_count)]
    hot = ACCOUNTS[:hot_count]
    holdings: dict[str, set[str]] = {}
    rest = list(hot)
    for worker, share in zip([*workers, *dead], held_shares, strict=False):
        holdings[worker], rest = set(rest[:share]), rest[share:]
    # A dead worker that held nothing leaves no orphan to know it by: the prediction
    # counts it as live (a wrong guess there costs a login, and is not checked here).
    assume(all(holdings.get(w) for w in dead))
    orphans = {a: w for w in dead for a in holdings[w]}
    taken = {a for held in holdings.values() for a in held}
    live = {w: len(holdings.get(w, set())) for w in [*workers, *dead]}

    prepared = {
        w: failover.plan(
            w,
            live_workers=live,
            hot=set(hot),
            mine=holdings.get(w, set()),
            taken=taken - holdings.get(w, set()),
            orphans=orphans,
            capacity=capacity,
        )
        for w in workers
    }
    for a in workers:
        assert prepared[a] <= orphans.keys()
        for b in workers:
            if a < b:
                assert not prepared[a] & prepared[b]
    # Once the leases lapse and the dead leave the fleet, each claims what it prepared.
    after = {w: live[w] for w in workers}
    for w in workers:
        claims = fleet.plan(
            w,
            live_workers=after,
            hot=set(hot),
            mine=holdings.get(w, set()),
            taken=(taken - orphans.keys()) - holdings.get(w, set()),
            capacity=capacity,
        ).claim
        assert prepared[w] == set(claims) & orphans.keys()


def test_the_fleet_looks_again_when_the_first_lease_lapses_before_the_next_tick() -> None:
    at = failover.look_again_at([4.0, 1.5, 30.0], 100.0, fleet_tick=5.0, margin=0.05)
    assert at == 100.0 + 1.5 + 0.05
    assert failover.look_again_at([5.0, 30.0], 100.0, fleet_tick=5.0, margin=0.05) is None
    assert failover.look_again_at([], 100.0, fleet_tick=5.0, margin=0.05) is None


def test_a_slow_machine_looks_again_when_a_holder_can_first_be_presumed_dead() -> None:
    threshold = 20.0 * failover.ORPHANED_BELOW  # ttl 20: 11.1 s
    leases = [threshold + 1.0] * 1000 + [19.0] * 500  # one holder late, one just renewed
    at = failover.first_sight_at(leases, 100.0, ttl=20.0, fleet_tick=20 / 6, rate=40.0, margin=0.05)
    assert at == pytest.approx(100.0 + 1.0 + 0.05)


def test_a_fast_machine_waits_for_its_next_tick_to_see_a_holder_dead() -> None:
    threshold = 20.0 * failover.ORPHANED_BELOW
    leases = [threshold + 1.0] * 1000
    at = failover.first_sight_at(
        leases, 100.0, ttl=20.0, fleet_tick=20 / 6, rate=400.0, margin=0.05
    )
    assert at is None  # 1,000 logins take ~5 s: 12 s ahead of the lapse is plenty


def test_no_lease_about_to_cross_means_no_early_tick() -> None:
    # Live holders' leases keep more than 2/3 of the ttl: the window below that is empty.
    assert (
        failover.first_sight_at(
            [19.0, 14.0], 100.0, ttl=20.0, fleet_tick=2.0, rate=None, margin=0.05
        )
        is None
    )
    assert (
        failover.first_sight_at([], 100.0, ttl=20.0, fleet_tick=2.0, rate=None, margin=0.05) is None
    )
    # Unmeasured: looking is the safe side.
    assert failover.first_sight_at(
        [12.0], 100.0, ttl=20.0, fleet_tick=2.0, rate=None, margin=0.05
    ) == pytest.approx(100.0 + 12.0 - 20.0 * failover.ORPHANED_BELOW + 0.05)
