"""Joining a fleet: which accounts the other workers are about to give back to this
one, so that it opens their sessions before they do. Pure.

A worker that joins (or is otherwise short of its share) gets its accounts from the
others: at their next fleet tick each gives back down to the fair share
(``fleet.plan``), and the short worker claims what they gave back. Opening those
sessions (login, EXAMINE, catch-up poll) only after the claim makes the hand-over as
slow as the newcomer's logins, thousands of them. It need not wait: like a failover's
survivor (``policies.failover``), the newcomer parks a session for each account it is
going to receive while the other worker still watches it, and once the lease is its own
the hand-over is only IDLE.

Which accounts those are follows from the plans everyone computes: each holder's own
``fleet.plan`` (from what it holds, ``holders``) says what it releases; this worker's
plan, as if those were already free, says which of them fall to it. A wrong guess costs
a login, never a second IDLE: the lease still decides, and a parked session nobody
hands over is closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from workers.policies import fleet


def short(me: str, *, live_workers: Mapping[str, int], hot: Set[str], mine: Set[str]) -> bool:
    """This worker holds less than its fair share (less 10%): the others give back to it."""
    workers = {*live_workers, me}
    return fleet.is_short(len(mine), fleet.fair_share(len(hot), len(workers)))


def incoming(
    me: str,
    *,
    live_workers: Mapping[str, int],
    hot: Set[str],
    mine: Set[str],
    holders: Mapping[str, str],
    capacity: int,
) -> set[str]:
    """The hot accounts live holders (``holders``: account -> worker) will give back to
    this worker at their next tick because it is short; empty when it is not."""
    if not short(me, live_workers=live_workers, hot=hot, mine=mine):
        return set()
    counts = dict(live_workers)
    counts[me] = len(mine)
    keeps = min(capacity, fleet.fair_share(len(hot), len(counts)))
    held_by: dict[str, set[str]] = {}
    for account_id, worker in holders.items():
        if worker != me and worker in counts:  # a dead holder's: the failover's business
            held_by.setdefault(worker, set()).add(account_id)
    taken = set(holders)
    released: set[str] = set()
    after = dict(counts)
    for worker, held in held_by.items():
        if len(held & hot) <= keeps:  # it gives back no hot account: no plan to compute
            continue
        gives = (
            set(
                fleet.plan(
                    worker,
                    live_workers=counts,
                    hot=hot,
                    mine=held,
                    taken=taken,
                    capacity=capacity,
                ).release
            )
            & hot
        )
        released |= gives
        after[worker] = len(held) - len(gives)
    if not released:
        return set()
    claims = fleet.plan(
        me,
        live_workers=after,
        hot=hot,
        mine=mine,
        taken=taken - released,
        capacity=capacity,
    ).claim
    return set(claims) & released
