"""Failing over a dead worker's accounts: when to look for its lapsing leases, which
accounts to log in to before their leases are free, and when to start. Pure.

After a worker dies its leases lapse up to a ttl later, and only then may another worker
watch its accounts. The restart itself (login, EXAMINE, catch-up poll: seconds for a
thousand accounts) need not wait for the lease; only IDLE must. So a survivor opens
those sessions while the leases run out, and at the lapse only has to say IDLE.

A live holder renews every ttl/3, so its leases always have more than 2/3 of the ttl
left; a lease with less than ``ORPHANED_BELOW`` left has missed a renewal by more than
ttl/9: its holder is presumed dead (``orphaned``), and one that lapses before the next
fleet tick certainly is: the supervisor looks again the moment it lapses
(``look_again_at``), not up to a tick later.

On a machine where those logins take long, the supervisor also looks again the moment
a lease would cross that threshold (``first_sight_at``), not up to a fleet tick later.
When to start those logins (``start_logins_at``) follows from this worker's own login
rate, measured on the running machine (``policies.login_rate``): late enough that a
false alarm on a fast machine costs nothing (the holder renews first), early enough
that on a slow one every session is open when its lease lapses. Never before the
holder is presumed dead: that is when the caller first asks.

Which survivor prepares which orphan is the claim plan every survivor will compute once
the leases lapse (``fleet.plan``), computed now as if the dead holders had already left
the fleet: the survivors' choices are disjoint, as their
claims will be. A wrong guess costs a login, never a second IDLE: the lease still
decides, and sessions nobody claims are closed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Set

from workers.policies import fleet

ORPHANED_BELOW = 5 / 9  # of the ttl: less left than this and a renewal was missed
# A failover's logins may run this much slower than measured: the rate is a decayed
# average, and a shared machine's load swings (the same burst floor measured 4.2 s and
# 12.9 s within two minutes here). Starting early costs only parked time.
LEAD_SLACK = 0.5
LEAD_MARGIN = 2.0  # seconds: the fleet tick that parks them, the first IDLE


def look_again_at(
    seconds_left: Iterable[float], now: float, *, fleet_tick: float, margin: float
) -> float | None:
    """When to run the next fleet tick early, given the seconds left on the leases others
    hold: ``margin`` after the first lapses, if one lapses before the next tick."""
    lapsing = [left for left in seconds_left if left < fleet_tick]
    return now + min(lapsing) + margin if lapsing else None


def start_logins_at(lapses: Iterable[float], rate: float | None) -> float:
    """When to start logging in to accounts whose leases lapse at ``lapses`` (one
    each, on the caller's clock) so that at ``rate`` logins a second each is in before
    its lapse: the k-th earliest lapse less k logins' time, the earliest of those, less
    the margins. No rate measured yet: at once (-inf), the safe default."""
    if rate is None or rate <= 0:
        return -math.inf
    start = math.inf
    for k, lapse in enumerate(sorted(lapses), start=1):
        start = min(start, lapse - k / rate * (1 + LEAD_SLACK))
    return start - LEAD_MARGIN


def first_sight_at(
    seconds_left: Iterable[float],
    now: float,
    *,
    ttl: float,
    fleet_tick: float,
    rate: float | None,
    margin: float,
) -> float | None:
    """When to run a fleet tick early so that a holder that stopped renewing is presumed
    dead the moment it can be (``ORPHANED_BELOW``), not up to a tick later: ``margin``
    after the first lease not yet orphaned would cross, if that comes before the next
    tick — and only when it matters: the leases crossing by then could not all be logged
    in to at ``rate`` if their logins began at the next tick. A live holder's leases
    cross nothing (they keep more than 2/3 of the ttl): looking costs one tick."""
    threshold = ttl * ORPHANED_BELOW
    crossing = [left for left in seconds_left if threshold <= left < threshold + fleet_tick]
    if not crossing:
        return None
    if start_logins_at((now + left for left in crossing), rate) >= now + fleet_tick:
        return None  # the next tick is early enough
    return now + min(crossing) - threshold + margin


def orphaned(taken: Mapping[str, float], ttl: float) -> set[str]:
    """Of the leases others hold (account -> seconds left), those whose holder missed a
    renewal."""
    return {account for account, left in taken.items() if left < ttl * ORPHANED_BELOW}


def plan(
    me: str,
    *,
    live_workers: Mapping[str, int],
    hot: Set[str],
    mine: Set[str],
    taken: Set[str],
    orphans: Mapping[str, str],
    capacity: int,
) -> set[str]:
    """The orphans (account -> its holder) this worker will claim once their leases
    lapse, if the fleet stays as it is but for their holders."""
    if not orphans:
        return set()
    dead = set(orphans.values()) - {me}
    survivors = {worker: n for worker, n in live_workers.items() if worker not in dead}
    after = fleet.plan(
        me,
        live_workers=survivors,
        hot=hot,
        mine=mine,
        taken=taken - orphans.keys(),
        capacity=capacity,
    )
    return set(after.claim) & orphans.keys()
