"""A newcomer's incoming accounts: what the other workers' own plans give back to it and
its own plan then claims — predicted before they do it."""

from __future__ import annotations

from workers.policies import fleet, handover

HOT = {f"acct-{i:03d}" for i in range(200)}
CAPACITY = 1000


def four_workers_hold_everything() -> dict[str, str]:
    """200 hot accounts shared by w1..w4 as their own plans left them (50 each)."""
    holders: dict[str, str] = {}
    for i, account in enumerate(sorted(HOT)):
        holders[account] = f"w{i % 4 + 1}"
    return holders


def counts(holders: dict[str, str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for worker in holders.values():
        found[worker] = found.get(worker, 0) + 1
    return found


def test_the_prediction_is_what_the_others_give_back_and_the_newcomer_then_claims() -> None:
    holders = four_workers_hold_everything()
    live = {**counts(holders), "w5": 0}
    predicted = handover.incoming(
        "w5", live_workers=live, hot=HOT, mine=set(), holders=holders, capacity=CAPACITY
    )
    # What then happens: each holder plans its tick, then the newcomer plans its own.
    released: set[str] = set()
    after = dict(live)
    for worker in ("w1", "w2", "w3", "w4"):
        held = {a for a, w in holders.items() if w == worker}
        plan = fleet.plan(
            worker, live_workers=live, hot=HOT, mine=held, taken=set(holders), capacity=CAPACITY
        )
        released |= set(plan.release)
        after[worker] = len(held) - len(plan.release)
    claimed = fleet.plan(
        "w5",
        live_workers=after,
        hot=HOT,
        mine=set(),
        taken=set(holders) - released,
        capacity=CAPACITY,
    ).claim
    assert predicted == set(claimed)
    assert len(predicted) == fleet.fair_share(len(HOT), 5)  # its whole share, ahead


def test_a_worker_with_its_share_expects_nothing() -> None:
    holders = four_workers_hold_everything()
    mine = {a for a, w in holders.items() if w == "w1"}
    live = counts(holders)
    assert not handover.short("w1", live_workers=live, hot=HOT, mine=mine)
    assert (
        handover.incoming("w1", live_workers=live, hot=HOT, mine=mine, holders=holders, capacity=9)
        == set()
    )


def test_a_dead_holders_accounts_are_left_to_the_failover() -> None:
    ordered = sorted(HOT)
    holders = {a: f"w{i % 3 + 1}" for i, a in enumerate(ordered[:180])}  # 60 each
    holders |= dict.fromkeys(ordered[180:], "w4")  # w4 is gone: its leases run out
    live = {"w1": 60, "w2": 60, "w3": 60, "w5": 0}
    predicted = handover.incoming(
        "w5", live_workers=live, hot=HOT, mine=set(), holders=holders, capacity=CAPACITY
    )
    assert len(predicted) == 30  # what w1..w3 hold above the fair share (50)
    assert all(holders[a] != "w4" for a in predicted)


def test_odd_holder_answers_predict_nothing_wrong() -> None:
    # Holders naming this worker itself, unknown workers, and accounts that are not hot.
    holders = {"acct-000": "w5", "acct-001": "nobody-known", "cold-1": "w1", "cold-2": "w1"}
    live = {"w1": 2, "w5": 0}
    predicted = handover.incoming(
        "w5", live_workers=live, hot=HOT, mine=set(), holders=holders, capacity=CAPACITY
    )
    assert predicted <= HOT - {"acct-000", "acct-001"}
    assert predicted == set()  # w1 holds no hot account: it has nothing to give back


def test_the_capacity_bounds_what_is_expected() -> None:
    holders = four_workers_hold_everything()
    live = {**counts(holders), "w5": 0}
    predicted = handover.incoming(
        "w5", live_workers=live, hot=HOT, mine=set(), holders=holders, capacity=7
    )
    assert len(predicted) <= 7
