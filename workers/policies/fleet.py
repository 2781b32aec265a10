"""Sharing the hot accounts among live workers, without a coordinator.

Rendezvous hashing ranks the live workers for each account (highest ``score`` first):
the top one is the account's preferred worker, and ``poll_owner`` (warm/cold polls) is
just that, so polls are partitioned with no coordination at all.

``plan`` is what one worker does in one tick. Inputs: the live workers with the lease
counts their heartbeats report, the hot accounts, the ones this worker holds and the ones
anyone holds (``taken``). With ``fair = ceil(hot / live workers)``:

- ``target = min(capacity, fair + slack)``, ``slack = 1 + fair // 20``.
- a worker is *short* when it holds fewer than ``fair - fair // 10 - 1`` (outside ±10%
  of its share: a worker that just joined, or one that could not claim its share).
- release: every held account that is no longer hot; down to ``capacity`` when above it;
  while some worker is short, down to ``fair`` when above it; otherwise down to
  ``target`` when above ``give_back_ratio · fair + 1`` (1.25·fair + 1) — first the
  accounts whose preferred worker is someone else, then those it ranks lowest.
- claim: every worker's plan replays the same greedy assignment: each free hot account
  (sorted by id) goes to its highest-ranked worker that still has room below ``target``
  (below ``fair`` while some worker is short, so that what the others give back goes to
  the short one); this worker claims what fell to it.

Invariants: deterministic (same inputs, same plan on every worker); a plan never claims
an account that is taken, never claims and releases the same account, never leaves this
worker above ``capacity``; plans computed by different workers from the same snapshot
claim disjoint sets; the gap between ``target`` and the give-back threshold keeps workers
from handing accounts back and forth, and while a worker is short nobody claims past
``fair`` nor gives back below it, so the hand-over to a newcomer cannot bounce either.
The lease stays the arbiter: a claim is only an attempt to acquire.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Set
from dataclasses import dataclass


@dataclass(frozen=True)
class FleetPlan:
    claim: tuple[str, ...]
    release: tuple[str, ...]
    fair_share: int
    target: int


def score(account_id: str, worker_id: str) -> int:
    digest = hashlib.blake2b(f"{account_id}\x00{worker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _rank(account_id: str) -> Callable[[str], tuple[int, str]]:
    return lambda worker: (-score(account_id, worker), worker)


def ranked_workers(account_id: str, workers: Iterable[str]) -> list[str]:
    """Workers by preference for this account, best first (ties by worker id)."""
    return sorted(workers, key=_rank(account_id))


def poll_owner(account_id: str, live_workers: Collection[str]) -> str:
    """The account's preferred live worker: it polls the account when no one watches it."""
    if not live_workers:
        raise ValueError("no live workers")
    return _preferred(account_id, tuple(sorted(live_workers)))


# A worker's own score of the accounts it holds, asked by each plan that gives back
# (its own, and every holder's replayed by a joining worker at each of its ticks).
_own_score = functools.lru_cache(maxsize=1 << 14)(score)


def _preferred(account_id: str, workers: tuple[str, ...]) -> str:
    return _ranking(account_id, workers)[0]


@functools.lru_cache(maxsize=1 << 15)
def _ranking(account_id: str, workers: tuple[str, ...]) -> tuple[str, ...]:
    # Asked for every account at every fleet tick (who polls it, for the watch report;
    # who claims it, in every worker's plan replayed by a joining one), while the live
    # workers rarely change: a hash per account and worker each time was a tenth of a
    # worker's CPU with 10,000 accounts.
    return tuple(sorted(workers, key=_rank(account_id)))


def owns_poll(
    account_id: str,
    me: str,
    *,
    holds_lease: bool,
    live_workers: Collection[str] | None,
    held_elsewhere: bool = False,
) -> bool:
    """Whether this worker polls the account: the lease holder does (a hot account's
    secondary poll); an account whose lease another worker held at the last fleet tick
    is that holder's; else its preferred live worker polls it; everyone, when the fleet
    is unknown (e.g. Redis down) — a poll twice is safe, dedup absorbs it; a poll by
    nobody is not (a holder that died loses its lease within the ttl, and the account is
    its preferred worker's again at the next tick)."""
    if holds_lease or not live_workers:
        return True
    if held_elsewhere:
        return False
    return poll_owner(account_id, live_workers) == me


def fair_share(hot_count: int, worker_count: int) -> int:
    return math.ceil(hot_count / max(worker_count, 1))


def is_short(count: int, fair: int) -> bool:
    """Outside ±10% of the fair share, below it: a worker that just joined, or one that
    could not claim its share."""
    return count < fair - fair // 10 - 1


def plan(
    me: str,
    *,
    live_workers: Mapping[str, int],
    hot: Set[str],
    mine: Set[str],
    taken: Set[str],
    capacity: int,
    give_back_ratio: float = 1.25,
) -> FleetPlan:
    """One worker's claims and releases for this tick (see the module docstring)."""
    counts = dict(live_workers)
    counts[me] = len(mine)  # our own count is fresher than our last heartbeat
    workers = tuple(sorted(counts))
    fair = fair_share(len(hot), len(workers))
    target = min(capacity, fair + 1 + fair // 20)

    # Without this a newcomer stays far below its share: the others, only slightly above
    # the new fair share, would stay under the give-back threshold and keep everything.
    short = any(is_short(count, fair) for count in counts.values())
    ceiling = min(capacity, fair) if short else target

    release = sorted(mine - hot)
    keep = sorted(mine & hot)
    limit = len(keep)
    if short and len(keep) > fair:
        limit = fair
    elif len(keep) > give_back_ratio * fair + 1:
        limit = target
    limit = min(limit, capacity)
    if len(keep) > limit:

        def worth_keeping(account_id: str) -> tuple[bool, int, str]:
            preferred = _preferred(account_id, workers) == me
            return (preferred, _own_score(account_id, me), account_id)

        keep.sort(key=worth_keeping)
        release.extend(sorted(keep[: len(keep) - limit]))
        keep = keep[len(keep) - limit :]

    room = {worker: max(ceiling - count, 0) for worker, count in counts.items()}
    # This worker's own room comes from the same snapshot as everyone else's (not from
    # what it keeps after this tick's releases): otherwise two workers could both count
    # the room and claim the same free account. Room freed by releases is used next tick.
    claims = _claims(me, workers, room, sorted(hot - taken - mine)) if room[me] else ()
    return FleetPlan(claims, tuple(release), fair, target)


def _claims(
    me: str, workers: tuple[str, ...], room: dict[str, int], free: list[str]
) -> tuple[str, ...]:
    """The greedy assignment every worker replays: each free account (in order) to its
    highest-ranked worker with room left; this worker's share of it."""
    claims: list[str] = []
    with_room = sum(1 for left in room.values() if left > 0)
    for account_id in free:
        if not with_room:
            break
        worker = next(w for w in _ranking(account_id, workers) if room[w] > 0)
        room[worker] -= 1
        if room[worker] == 0:
            with_room -= 1
        if worker == me:
            claims.append(account_id)
        if room[me] == 0:
            break
    return tuple(claims)
