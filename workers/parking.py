"""Which accounts have a session parked for a failover (``policies.failover``): opened
while a dead worker's leases run out, handed on to IDLE once the lease is ours, closed
when nobody claims them.

This only keeps the record and asks the lease backend who holds the orphans; the
supervisor starts, activates and stops the watches (it alone decides which exist), so a
parked session and a lease won meanwhile are seen by one owner. Loop thread only.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from application.leases import LeaseBackend, LeaseBackendUnavailable
from workers.policies import failover


@dataclass(frozen=True)
class Parking:
    park: tuple[str, ...]  # open a parked session for these (if none is open)
    close: tuple[str, ...]  # no longer expected: stop their parked sessions


class ParkedSessions:
    def __init__(
        self, worker_id: str, lease: LeaseBackend, *, ttl: float, capacity: int
    ) -> None:
        self._me = worker_id
        self._lease = lease
        self._ttl = ttl
        self._capacity = capacity
        self._parked: set[str] = set()

    def plan(
        self, live: dict[str, int], hot: set[str], mine: Set[str], taken: dict[str, float]
    ) -> Parking:
        """After a fleet tick's claims: the orphans this worker will claim once their
        leases lapse, and the parked sessions no longer expected."""
        wanted: set[str] = set()
        orphans = failover.orphaned(taken, self._ttl)
        if orphans:
            try:
                holders = self._lease.holders(orphans)
            except LeaseBackendUnavailable:
                holders = {}
            wanted = failover.plan(
                self._me,
                live_workers=live,
                hot=hot,
                mine=mine,
                taken=set(taken),
                orphans=holders,
                capacity=self._capacity,
            )
        return Parking(tuple(sorted(wanted - self._parked)), tuple(sorted(self._parked - wanted)))

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
