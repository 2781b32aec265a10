"""Parked sessions for a failover (``policies.prewarm``): opened while a dead worker's
leases run out, handed to the watch when the lease is ours, closed when nobody claims
them. Used by the supervisor's loop thread only."""

from __future__ import annotations

from collections.abc import Set

from application.leases import Lease, LeaseBackendUnavailable
from workers.policies import prewarm
from workers.watch import WatchManager


class Prewarmer:
    def __init__(
        self, worker_id: str, lease: Lease, watches: WatchManager, *, ttl: float, capacity: int
    ) -> None:
        self._me = worker_id
        self._lease = lease
        self._watches = watches
        self._ttl = ttl
        self._capacity = capacity
        self._parked: set[str] = set()

    def update(
        self, live: dict[str, int], hot: set[str], mine: Set[str], taken: dict[str, float]
    ) -> None:
        """After a fleet tick's claims: park sessions for the orphans this worker will
        claim once their leases lapse; close those no longer expected."""
        wanted: set[str] = set()
        orphans = prewarm.orphaned(taken, self._ttl)
        if orphans:
            try:
                holders = self._lease.holders(orphans)
            except LeaseBackendUnavailable:
                holders = {}
            wanted = prewarm.plan(
                self._me,
                live_workers=live,
                hot=hot,
                mine=mine,
                taken=set(taken),
                orphans=holders,
                capacity=self._capacity,
            )
        for account_id in sorted(wanted - self._parked):
            if not self._watches.is_watching(account_id):
                self._parked.add(account_id)
                self._watches.start(account_id, parked=True)
        for account_id in self._parked - wanted:
            self._parked.discard(account_id)
            self._watches.stop(account_id, "unclaimed")

    def take(self, account_id: str) -> bool:
        """The lease is ours: a parked session goes on to IDLE. False when there is none."""
        if account_id not in self._parked:
            return False
        self._parked.discard(account_id)
        return self._watches.activate(account_id)

    def forget(self, account_id: str) -> None:
        """Its watch stopped."""
        self._parked.discard(account_id)
