"""Which accounts have a session parked: for a failover (``policies.failover``), opened
while a dead worker's leases run out; for a hand-over to a worker short of its share
(``policies.handover``), opened while the other worker still watches the account.
Handed on to IDLE once the lease is ours, closed when nobody hands the account over.

This keeps the record, asks the lease backend who holds the accounts, and says when the
logins for a failover should start — from this worker's measured login rate
(``login_rate``), so that all are open when the leases lapse; a hand-over's start at
once (the holders give back at their next tick). The supervisor starts,
activates and stops the watches (it alone decides which exist), so a parked session and
a lease won meanwhile are seen by one owner. Loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass

from application.leases import LeaseBackend, LeaseBackendUnavailable
from workers.policies import failover, handover

log = logging.getLogger("tidings.supervisor")

# While parked sessions wait for their hand-over, the supervisor plans again this often
# (seconds): the holders give back at their own ticks, and the claim should follow.
HANDOVER_LOOK = 1.0


@dataclass(frozen=True)
class Parking:
    park: tuple[str, ...]  # a failover's: open a parked session (if none is open)
    close: tuple[str, ...]  # no longer expected: stop their parked sessions
    look_again_at: float | None = None  # logins or hand-overs wait: plan again then
    handover: tuple[str, ...] = ()  # to be given to this worker: park these too


class ParkedSessions:
    def __init__(
        self,
        worker_id: str,
        lease: LeaseBackend,
        *,
        ttl: float,
        capacity: int,
        login_rate: Callable[[], float | None],
    ) -> None:
        self._me = worker_id
        self._lease = lease
        self._ttl = ttl
        self._capacity = capacity
        self._login_rate = login_rate
        self._parked: set[str] = set()

    def plan(
        self,
        now: float,
        live: dict[str, int],
        hot: set[str],
        mine: Set[str],
        taken: dict[str, float],
        *,
        holders: Mapping[str, str] | None = None,
    ) -> Parking:
        """After a fleet tick's claims (``taken``: account -> seconds left on the lease
        someone else holds, at ``now``): the orphans this worker will claim once their
        leases lapse and whose logins are due, and the parked sessions no longer
        expected. A parked session whose account is hot stays while this worker is
        short of its share, and after that while the account is free: this worker may
        claim it at its next turn (a tick claims for a limited time, and plans made
        from heartbeat counts a tick old may give it to this worker only then); if
        another worker claims it, it is taken at the next tick and closed then.
        ``holders`` (who holds each of ``taken``, read with it) saves reading them
        again."""
        wanted: set[str] = set()
        orphans = failover.orphaned(taken, self._ttl)
        if orphans:
            wanted = failover.plan(
                self._me,
                live_workers=live,
                hot=hot,
                mine=mine,
                taken=set(taken),
                orphans=self._holders(orphans, holders),
                capacity=self._capacity,
            )
        incoming: set[str] = set()
        short = handover.short(self._me, live_workers=live, hot=hot, mine=mine)
        if short:
            incoming = handover.incoming(
                self._me,
                live_workers=live,
                hot=hot,
                mine=mine,
                holders=self._holders(taken.keys() - orphans, holders),
                capacity=self._capacity,
            )
        # While short, the prediction shifts as the holders give back (heartbeat counts
        # a tick old, a holder giving back more than foreseen): a hot account parked
        # for stays parked until this worker has its share.
        keep = hot if short else hot - taken.keys() - mine
        close = tuple(sorted(self._parked - wanted - incoming - keep))
        if close:
            log.info(
                "parking.close accounts=%d taken=%d not_hot=%d mine=%d",
                len(close),
                len(taken.keys() & close),
                len(set(close) - hot),
                len(mine & set(close)),
            )
        look = now + HANDOVER_LOOK if incoming else None
        given = tuple(sorted(incoming - self._parked))
        new = wanted - self._parked
        if not new:
            return Parking((), close, look, given)
        start = failover.start_logins_at((now + taken[a] for a in new), self._login_rate())
        if now < start:
            return Parking((), close, min(start, look or start), given)
        # The earliest lapse first: the login pool takes them in this order.
        return Parking(tuple(sorted(new, key=lambda a: (taken[a], a))), close, look, given)

    def _holders(self, accounts: Set[str], known: Mapping[str, str] | None) -> dict[str, str]:
        if not accounts:
            return {}
        if known is not None:
            return {account: known[account] for account in accounts if account in known}
        try:
            return self._lease.holders(accounts)
        except LeaseBackendUnavailable:
            return {}

    def parked(self, account_id: str) -> None:
        """A parked session was opened for it."""
        self._parked.add(account_id)

    def take(self, account_id: str) -> bool:
        """The lease is ours (or the session is closing): True if a session was parked."""
        if account_id not in self._parked:
            return False
        self._parked.discard(account_id)
        return True

    def __contains__(self, account_id: object) -> bool:
        return account_id in self._parked
