"""The one owner of which watches exist in this worker, and of the leases behind them.

Per account (loop thread only):

    (none) --claim, lease won--> watching --watch stops, a failure--> backing off
    backing off --restart due, lease still ours--> watching (same lease, new generation)
    (none) --park--> parked (session open, lease not ours) --claim won--> watching (IDLE)
    parked --unclaimed--> (none)
    watching | backing off --stop (release, lease lost or expired, forget)--> (none)

A lease of ours is given back only once its watch has ended (the watch's stop news, or
``HANDOVER_WAIT`` at most): given back while the session still idled, the next holder's
IDLE could reach the server before ours had gone, one mailbox in IDLE twice at once.

Invariants: only this component starts, activates and stops watches in the
``WatchManager`` (``ParkedSessions`` only records parked ones, the supervisor only asks),
so a parked session closing while its lease is won is seen by the one component that
can start the watch again; a lease held means a watch or a scheduled restart — a quiet
stop under a lease still ours starts the watch again (``policies.watch_stops``); a
watch is only kept under a lease the ``LeaseKeeper`` still trusts.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Iterable, Mapping

from application.leases import LeaseBackend, LeaseBackendUnavailable
from application.mail.ports import MailboxThrottled
from workers.collaborators import Watches
from workers.metrics import WorkerMetrics
from workers.news import WatchStopped
from workers.parking import ParkedSessions
from workers.policies.backoff import RestartBackoff
from workers.policies.lease_keeper import LeaseKeeper, Teardown
from workers.policies.scheduling import DueScheduler
from workers.policies.watch_stops import AfterStop, StopReason, WhyStopped, after_stop
from workers.watch import State

log = logging.getLogger("tidings.supervisor")

# How long a stopped watch's lease waits for the watch to end before it is given back
# anyway: closing a session takes milliseconds; a pool stuck longer must not hold the
# account from the fleet until the lease's ttl.
HANDOVER_WAIT = 5.0


class WatchOwner:
    def __init__(
        self,
        lease: LeaseBackend,
        watches: Watches,
        parking: ParkedSessions,
        metrics: WorkerMetrics,
        *,
        ttl: float,
    ) -> None:
        self.lease = lease
        self.watches = watches
        self.parking = parking
        self.metrics = metrics
        self.keeper = LeaseKeeper(ttl)
        self.backoff = RestartBackoff()
        self.restarts: DueScheduler[str] = DueScheduler()
        self._attempts: dict[str, int] = {}
        self._renewals_failing_since: float | None = None  # an outage's first failed renewal
        # Leases of stopped watches that have not ended yet: account -> (token, give back by).
        self._ending: dict[str, tuple[str, float]] = {}

    # --- what the supervisor asks ----------------------------------------------------

    def holds(self, account_id: str) -> bool:
        return self.keeper.holds(account_id)

    def mine(self) -> frozenset[str]:
        """Held or being acquired."""
        return self.keeper.held_accounts() | self.keeper.pending_accounts()

    def held(self) -> frozenset[str]:
        """The accounts whose lease this worker holds."""
        return self.keeper.held_accounts()

    def taken_by(self, accounts: Collection[str]) -> tuple[dict[str, float], dict[str, str]]:
        """Of ``accounts``, those whose lease someone holds, with the seconds until each
        lapses unless renewed, and who holds each (raises ``LeaseBackendUnavailable``)."""
        found = self.lease.held_by(accounts)
        return (
            {account: left for account, (left, _) in found.items()},
            {account: holder for account, (_, holder) in found.items()},
        )

    def watch_states(self) -> dict[str, State]:
        """Every watch of this worker and its state."""
        return self.watches.watching()

    def login_rate(self) -> float | None:
        """Watch logins a second as measured (None: not yet)."""
        return self.watches.login_rate()

    def take_probe_counts(self) -> dict[str, int]:
        """IDLE liveness probes by outcome since the last take."""
        return self.watches.take_probe_counts()

    def is_watching(self, account_id: str) -> bool:
        return self.watches.is_watching(account_id)

    def backing_off(self, account_id: str) -> bool:
        return account_id in self.restarts

    def next_wakeup(self) -> float | None:
        """The next time (monotonic) a lease or a restart needs the loop."""
        ending = min((by for _, by in self._ending.values()), default=None)
        times = [
            t
            for t in (self.keeper.next_wakeup(), self.restarts.next_due(), ending)
            if t is not None
        ]
        return min(times) if times else None

    def __len__(self) -> int:
        return len(self.keeper)

    # --- what the supervisor tells it to do -------------------------------------------

    def renew(self, now: float) -> None:
        """Stop watches whose lease expired; renew held leases when due."""
        for account_id in [a for a, (_, by) in self._ending.items() if by <= now]:
            self._give_back(account_id)
        self._teardown(self.keeper.expired(now))
        if not self.keeper.due(now):
            return
        batch = self.keeper.start_renewal(now)
        try:
            results = self.lease.renew_many(batch.tokens)
        except LeaseBackendUnavailable as error:
            self.metrics.lease_renewals_failed.inc()
            if self._renewals_failing_since is None:  # once per outage, not per retry
                self._renewals_failing_since = now
                cause = error.__cause__ or error
                log.warning(
                    "lease.renew_failed leases=%d error=%s", len(batch.tokens), type(cause).__name__
                )
            self._teardown(self.keeper.on_renew_failed(batch, time.monotonic()))
            return
        if self._renewals_failing_since is not None:
            log.warning(
                "lease.renew_recovered leases=%d after=%.1fs",
                len(batch.tokens),
                now - self._renewals_failing_since,
            )
            self._renewals_failing_since = None
        self.metrics.leases_renewed.inc(sum(results.values()))
        self._teardown(self.keeper.on_renew_results(batch, results))

    def claim(self, account_id: str) -> bool:
        """Try to win the account's lease and watch it; True when a watch started."""
        return bool(self.claim_many([account_id]))

    def claim_many(self, accounts: Iterable[str]) -> list[str]:
        """Try to win these accounts' leases (one round trip) and watch them; the
        accounts whose watch started."""
        # One still ours until its old watch has ended is not claimed again.
        claims = [self.keeper.claim(a) for a in accounts if a not in self._ending]
        wanted = [claim for claim in claims if claim is not None]
        if not wanted:
            return []
        sent_at = time.monotonic()
        try:
            tokens = self.lease.acquire_many([claim.account_id for claim in wanted])
        except LeaseBackendUnavailable:
            tokens = {}
        started: list[str] = []
        for claim in wanted:
            token = tokens.get(claim.account_id)
            if token is None:
                self.keeper.on_acquire_failed(claim)
            elif not self.keeper.on_acquired(claim, token, sent_at):
                self._release(claim.account_id, token)
            elif self._start(claim.account_id):
                started.append(claim.account_id)
        return started

    def restart_due(self, now: float, syncable: Collection[str]) -> list[str]:
        """Restart the watches whose backoff ran out; the accounts started."""
        due = self.restarts.pop_due(now)
        return [a for a in due if self.keeper.holds(a) and a in syncable and self._start(a)]

    def park(
        self,
        now: float,
        live: dict[str, int],
        hot: set[str],
        taken: Mapping[str, float],
        holders: Mapping[str, str] | None = None,
    ) -> float | None:
        """Open sessions for the orphans this worker will claim, once their logins are
        due, and for the accounts the others are about to give to it; close the
        unclaimed. Returns when to plan again (logins not yet due, hand-overs awaited).
        ``holders``: who holds ``taken``, when read with it."""
        plan = self.parking.plan(now, live, hot, self.mine(), dict(taken), holders=holders)
        if plan.park:
            rate = self.watches.login_rate()
            log.info(
                "failover.logins accounts=%d login_rate=%s lapse_in=%.1f",
                len(plan.park),
                f"{rate:.1f}" if rate else "-",
                min(taken[a] for a in plan.park),
            )
        if plan.handover:
            log.info("handover.logins accounts=%d", len(plan.handover))
        for account_id in (*plan.park, *plan.handover):
            if not self.watches.is_watching(account_id):
                self.parking.parked(account_id)
                self.watches.start(account_id, parked=True)
        for account_id in plan.close:
            self.parking.take(account_id)
            self.watches.stop(account_id, StopReason.UNCLAIMED)
        return plan.look_again_at

    def stopped(self, news: WatchStopped, now: float) -> tuple[AfterStop, bool]:
        """A watch stopped: what was decided, and whether a watch started again."""
        account_id = news.account_id
        self._give_back(account_id)
        self.parking.take(account_id)
        generation = self._attempts.pop(account_id, None)
        decision = after_stop(
            news.reason,
            current=generation is not None,
            held=self.keeper.holds(account_id),
            watching=self.watches.is_watching(account_id),
        )
        if decision is AfterStop.START_AGAIN:
            return decision, self._start(account_id)
        if decision is AfterStop.BACK_OFF and generation is not None:
            if news.lived > 0:
                self.backoff.connected(account_id, generation, now - news.lived)
            error = news.error
            retry_after = error.retry_after if isinstance(error, MailboxThrottled) else None
            restart = self.backoff.failed(account_id, generation, now, retry_after=retry_after)
            if restart is not None and self.keeper.holds(account_id):
                self.restarts.schedule(account_id, restart.at)
                log.info(
                    "watch.backoff account_id=%s reason=%s delay=%.1f",
                    account_id,
                    news.reason,
                    restart.delay,
                )
        return decision, False

    def refresh_folders(self, account_id: str) -> None:
        """The account's folders were listed again: its watch, if any, asks anew which
        to have pushed."""
        self.watches.refresh_folders(account_id)

    def stop(self, account_id: str, reason: WhyStopped) -> None:
        """Stop the watch (if any) and give its lease back (if still ours)."""
        self.restarts.cancel(account_id)
        self.backoff.cancel(account_id)
        ending = self.watches.stop(account_id, reason)
        token = self.keeper.stop(account_id)
        if token is None:
            return
        if ending:
            self._ending[account_id] = (token, time.monotonic() + HANDOVER_WAIT)
        else:
            self._release(account_id, token)

    def forget(self, account_id: str, reason: WhyStopped) -> None:
        self.stop(account_id, reason)
        self.backoff.forget(account_id)

    def close(self) -> None:
        """Shutdown: every watch closed, every lease given back."""
        tokens = self.keeper.stop_all()
        self.watches.close()  # waits for the watches to end
        tokens.update((a, token) for a, (token, _) in self._ending.items())
        self._ending.clear()
        with contextlib.suppress(LeaseBackendUnavailable):
            if tokens:
                self.lease.release_many(tokens)

    # --- internals ---------------------------------------------------------------------

    def _start(self, account_id: str) -> bool:
        # A parked session opened ahead only has IDLE left to do.
        if not (self.parking.take(account_id) and self.watches.activate(account_id)):
            if self.watches.is_watching(account_id):
                return False
            self.watches.start(account_id)
        self._attempts[account_id] = self.backoff.begin(account_id)
        return True

    def _teardown(self, teardowns: list[Teardown]) -> None:
        for t in teardowns:
            self.metrics.leases_lost.labels(t.reason).inc()
            log.warning("lease.%s account_id=%s", t.reason, t.account_id)
            self.stop(t.account_id, StopReason(t.reason))

    def _give_back(self, account_id: str) -> None:
        ending = self._ending.pop(account_id, None)
        if ending is not None:
            self._release(account_id, ending[0])

    def _release(self, account_id: str, token: str) -> None:
        with contextlib.suppress(LeaseBackendUnavailable):
            self.lease.release(account_id, token)
