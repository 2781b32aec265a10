"""Fleet coordination: rendezvous poll owners, claims up to a fair share, give-backs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.policies import fleet
from workers.policies.fleet import FleetPlan, fair_share, plan, poll_owner, ranked_workers

ACCOUNTS = [f"acct-{i}" for i in range(1000)]


def test_poll_owner_is_deterministic_and_roughly_even() -> None:
    workers = ["w1", "w2", "w3", "w4"]
    owners = [poll_owner(a, workers) for a in ACCOUNTS]
    assert owners == [poll_owner(a, list(reversed(workers))) for a in ACCOUNTS]
    counts = Counter(owners)
    assert set(counts) == set(workers)
    assert all(180 <= n <= 320 for n in counts.values()), counts
    assert all(poll_owner(a, workers) == ranked_workers(a, workers)[0] for a in ACCOUNTS[:50])


def test_a_joining_worker_only_takes_accounts_it_is_preferred_for() -> None:
    before = ["w1", "w2", "w3"]
    after = [*before, "w4"]
    for account in ACCOUNTS:
        new = poll_owner(account, after)
        assert new in (poll_owner(account, before), "w4")


def test_poll_owner_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        poll_owner("a", [])


def test_a_lone_worker_claims_every_free_hot_account_up_to_capacity() -> None:
    hot = set(ACCOUNTS[:10])
    result = plan("w1", live_workers={}, hot=hot, mine=set(), taken=set(), capacity=100)
    assert set(result.claim) == hot and result.release == ()
    capped = plan("w1", live_workers={}, hot=hot, mine=set(), taken=set(), capacity=4)
    assert len(capped.claim) == 4


def test_taken_accounts_are_never_claimed() -> None:
    hot = set(ACCOUNTS[:10])
    taken = set(ACCOUNTS[:3])
    result = plan(
        "w1", live_workers={"w1": 0, "w2": 3}, hot=hot, mine=set(), taken=taken, capacity=100
    )
    assert not set(result.claim) & taken


def test_accounts_no_longer_hot_are_released() -> None:
    result = plan(
        "w1", live_workers={"w1": 2}, hot={"a"}, mine={"a", "b"}, taken={"a", "b"}, capacity=100
    )
    assert result.release == ("b",)


def test_a_worker_over_capacity_releases_down_to_it() -> None:
    hot = set(ACCOUNTS[:10])
    result = plan("w1", live_workers={}, hot=hot, mine=hot, taken=hot, capacity=6)
    assert len(result.release) == 4 and result.claim == ()


def test_well_above_the_fair_share_gives_back_to_the_target() -> None:
    hot = set(ACCOUNTS[:300])
    mine = set(ACCOUNTS[:130])
    # Fair share 100, target 100 + 1 + 5 = 106, threshold 126; nobody is short (< 89).
    result = plan(
        "w1",
        live_workers={"w1": 130, "w2": 95, "w3": 95},
        hot=hot,
        mine=mine,
        taken=hot,
        capacity=1000,
    )
    assert result.fair_share == 100 and result.target == 106
    assert len(result.release) == 24 and result.claim == ()


def test_a_joining_worker_makes_the_others_give_back_to_the_fair_share() -> None:
    hot = set(ACCOUNTS[:100])
    mine = set(ACCOUNTS[:100])
    # A second worker joined: fair share 50; w2 holds nothing, so w1 keeps just 50.
    result = plan(
        "w1", live_workers={"w1": 100, "w2": 0}, hot=hot, mine=mine, taken=mine, capacity=1000
    )
    assert result.fair_share == 50 and result.target == 53
    assert len(result.release) == 50 and result.claim == ()
    # What is kept is mostly what w1 is preferred for.
    kept = mine - set(result.release)
    assert sum(poll_owner(a, ["w1", "w2"]) == "w1" for a in kept) >= 45


def test_slightly_above_the_fair_share_keeps_everything_while_nobody_is_short() -> None:
    hot = set(ACCOUNTS[:150])
    mine = set(ACCOUNTS[:60])
    # Fair share 50, give-back threshold 63.5; nobody below 50 - 5 - 1 = 44.
    result = plan(
        "w1",
        live_workers={"w1": 60, "w2": 45, "w3": 45},
        hot=hot,
        mine=mine,
        taken=hot,
        capacity=1000,
    )
    assert result.release == () and result.claim == ()


def test_a_short_worker_makes_the_others_give_back_down_to_the_fair_share() -> None:
    hot = set(ACCOUNTS[:100])
    mine = set(ACCOUNTS[:63])
    # Fair share 50: w2 (37) is short, so w1 gives back 13 although 63 < 63.5.
    result = plan(
        "w1", live_workers={"w1": 63, "w2": 37}, hot=hot, mine=mine, taken=hot, capacity=1000
    )
    assert len(result.release) == 13 and result.claim == ()


def test_while_a_worker_is_short_nobody_else_claims_past_the_fair_share() -> None:
    hot = set(ACCOUNTS[:100])
    free = set(ACCOUNTS[:10])
    counts = {"w1": 48, "w2": 42}  # fair 50: w2 is short (below 44)
    claims = {
        w: plan(w, live_workers=counts, hot=hot, mine=set(), taken=hot - free, capacity=1000)
        for w in counts
    }
    # (``mine`` is empty here, so each plan's own count is 0: only the shared counts
    # above decide the room, as they do for every worker alike.)
    assert all(len(p.claim) <= 50 for p in claims.values())


def test_a_fifth_worker_joining_gets_its_share_in_two_rounds() -> None:
    workers = ["w1", "w2", "w3", "w4"]
    hot = set(ACCOUNTS[:400])
    holdings: dict[str, set[str]] = {w: set() for w in workers}
    simulate(workers, hot, holdings, capacity=1000, rounds=3)
    assert all(95 <= len(h) <= 105 for h in holdings.values())
    holdings["w5"] = set()
    # Round 1: the others see w5 short and give back; round 2: w5 claims what they gave.
    simulate([*workers, "w5"], hot, holdings, capacity=1000, rounds=2)
    assert set().union(*holdings.values()) == hot
    assert all(72 <= len(h) <= 88 for h in holdings.values()), {
        w: len(h) for w, h in holdings.items()
    }
    history = simulate([*workers, "w5"], hot, holdings, capacity=1000, rounds=3)
    assert all(p.claim == () and p.release == () for p in history[-1].values())


def test_fair_share() -> None:
    assert fair_share(0, 3) == 0
    assert fair_share(10, 3) == 4
    assert fair_share(10, 0) == 10


def simulate(
    workers: list[str],
    hot: set[str],
    holdings: dict[str, set[str]],
    capacity: int,
    rounds: int = 12,
) -> list[dict[str, FleetPlan]]:
    """Every round each worker plans from the same snapshot, then releases and claims."""
    history = []
    for _ in range(rounds):
        counts = {w: len(holdings[w]) for w in workers}
        taken = set().union(*holdings.values())
        plans = {
            w: plan(
                w, live_workers=counts, hot=hot, mine=holdings[w], taken=taken, capacity=capacity
            )
            for w in workers
        }
        history.append(plans)
        claimed = [a for p in plans.values() for a in p.claim]
        assert len(claimed) == len(set(claimed)), "one account claimed by two workers"
        assert not set(claimed) & taken
        for w, p in plans.items():
            assert not set(p.claim) & set(p.release)
            holdings[w] = (holdings[w] - set(p.release)) | set(p.claim)
            assert len(holdings[w]) <= capacity
    return history


@settings(max_examples=60, deadline=None)
@given(
    n_workers=st.integers(1, 6),
    n_hot=st.integers(0, 300),
    capacity=st.integers(1, 400),
    seed_holdings=st.lists(st.integers(0, 5), max_size=300),
)
def test_rebalancing_converges_without_double_assignment(
    n_workers: int, n_hot: int, capacity: int, seed_holdings: list[int]
) -> None:
    workers = [f"w{i}" for i in range(n_workers)]
    hot = set(ACCOUNTS[:n_hot])
    # Start from an arbitrary (possibly lopsided) disjoint holding, within capacity.
    holdings: dict[str, set[str]] = {w: set() for w in workers}
    for account, owner in zip(ACCOUNTS, seed_holdings, strict=False):
        worker = workers[owner % n_workers]
        if len(holdings[worker]) < capacity:
            holdings[worker].add(account)
    history = simulate(workers, hot, holdings, capacity)
    final = history[-1]
    assert all(p.claim == () and p.release == () for p in final.values()), "not converged"
    held = set().union(*holdings.values())
    assert held <= hot
    fair = fair_share(n_hot, n_workers)
    target = min(capacity, fair + 1 + fair // 20)
    if n_workers * target >= n_hot:
        assert held == hot, "hot accounts left unwatched"
    for w in workers:
        assert len(holdings[w]) <= max(min(target, capacity), 1.25 * fair + 1)


def test_after_a_worker_dies_the_survivors_take_its_accounts() -> None:
    workers = ["w1", "w2", "w3"]
    hot = set(ACCOUNTS[:90])
    holdings: dict[str, set[str]] = {w: set() for w in workers}
    simulate(workers, hot, holdings, capacity=1000, rounds=3)
    assert set().union(*holdings.values()) == hot
    del holdings["w3"]  # its leases expired, its heartbeat is gone
    simulate(["w1", "w2"], hot, holdings, capacity=1000, rounds=3)
    assert set().union(*holdings.values()) == hot
    assert all(40 <= len(h) <= 50 for h in holdings.values())


def test_the_lease_holder_owns_the_poll_else_the_preferred_live_worker() -> None:
    workers = ["w1", "w2", "w3"]
    owner = fleet.poll_owner("acct", workers)
    other = next(w for w in workers if w != owner)
    assert fleet.owns_poll("acct", owner, holds_lease=False, live_workers=workers)
    assert not fleet.owns_poll("acct", other, holds_lease=False, live_workers=workers)
    assert fleet.owns_poll("acct", other, holds_lease=True, live_workers=workers)


def test_an_account_another_worker_holds_is_polled_by_its_holder_alone() -> None:
    workers = ["w1", "w2", "w3"]
    owner = fleet.poll_owner("acct", workers)
    assert not fleet.owns_poll(
        "acct", owner, holds_lease=False, held_elsewhere=True, live_workers=workers
    )
    assert fleet.owns_poll("acct", owner, holds_lease=False, held_elsewhere=True, live_workers=None)


def test_with_the_fleet_unknown_everyone_polls() -> None:
    assert fleet.owns_poll("acct", "w1", holds_lease=False, live_workers=None)
    assert fleet.owns_poll("acct", "w1", holds_lease=False, live_workers=[])


def test_poll_owner_is_the_same_whatever_the_order_or_kind_of_the_worker_collection() -> None:
    workers = ["w3", "w1", "w2"]
    for account in ACCOUNTS[:100]:
        owner = poll_owner(account, workers)
        assert owner == ranked_workers(account, workers)[0]
        assert poll_owner(account, set(workers)) == owner
        assert poll_owner(account, {w: 0 for w in sorted(workers)}) == owner
        assert poll_owner(account, [w for w in workers if w != owner]) != owner
