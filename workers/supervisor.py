"""The watch supervisor: one worker process's loop (SPEC §7).

A thin loop over small policies (``workers.policies``): all policy state is touched by
the loop thread only. Other threads — the signal subscriber, watch and poll pools —
hand their news over through a queue and wake the loop.

The loop itself never waits for the database: the account directory is read on a thread
of its own (``DirectoryReader``), whose answers come back as news too — a database
outage must not hold up lease renewals (the leases would lapse) nor signals.

Each turn:
1. drain news: signals (account changed, sync now, user active), watch stops, polls done,
   directory answers (a refresh from the read model, an account looked up for a signal);
2. leases: stop watches whose lease expired; renew held leases when due
   ("not yours" -> stop that watch now);
3. fleet tick (every ``fleet_tick`` s, or at once after a signal): ask for a directory
   refresh, heartbeat, classify tiers, plan claims/releases, acquire leases and start
   watches for claims, stop watches and release leases for releases; park sessions for
   a dead worker's accounts this worker will claim once their leases lapse
   (``Prewarmer``);
4. restart watches whose backoff ran out (same lease, new generation);
5. start due polls this worker owns: the lease holder for hot accounts (secondary poll),
   the rendezvous-hash owner among live workers for the others; everyone, when the
   fleet is unknown (Redis down) — dedup keeps that safe.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from application.app import App
from application.leases import Lease, LeaseBackendUnavailable, WorkerRegistry
from application.mail.ports import MailboxThrottled
from application.signals import Signal
from workers.directory import AccountDirectory, AccountInfo, DirectoryReader
from workers.metrics import WorkerMetrics
from workers.policies import fleet
from workers.policies.backoff import RestartBackoff
from workers.policies.lease_keeper import LeaseKeeper, Teardown
from workers.policies.scheduling import DueScheduler
from workers.policies.tiers import NEVER, RecentUsers, TierPolicy, TierSettings
from workers.poll import Poller
from workers.prewarming import Prewarmer
from workers.sync import AccountSyncer, SyncOutcome
from workers.watch import WatchManager
from workers.watch_hooks import SupervisedWatchHooks

log = logging.getLogger("tidings.supervisor")

# A turn woken by news alone only drains the news; the rest of a turn (leases, restarts,
# polls) runs at most this often, and metrics at most every METRICS_INTERVAL.
CHORES_INTERVAL = 0.05
METRICS_INTERVAL = 1.0
FLEET_COALESCE = 0.05  # signals in a burst share one fleet tick

QUIET_STOPS = frozenset(
    {"stopped", "released", "shutdown", "stale", "lost", "expired", "deactivated", "unclaimed"}
)


@dataclass(frozen=True)
class SupervisorSettings:
    worker_id: str
    lease_ttl: float = 90.0
    fleet_tick: float = 5.0
    poll_warm: float = 300.0
    poll_cold: float = 1800.0
    poll_concurrency: int = 8
    poll_deadline: float = 120.0
    max_accounts_per_worker: int = 5000
    hot_budget_per_worker: int = 2000
    watch_pool: int = 16
    dead_after: float = 300.0
    reidle_after: float = 25 * 60.0


class Supervisor:
    def __init__(
        self,
        app: App,
        syncer: AccountSyncer,
        lease: Lease,
        registry: WorkerRegistry,
        settings: SupervisorSettings,
        *,
        metrics: WorkerMetrics | None = None,
        on_ingested: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.syncer = syncer
        self.lease = lease
        self.registry = registry
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self.directory = AccountDirectory(app)
        self._on_ingested = on_ingested
        self._news: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self.keeper = LeaseKeeper(settings.lease_ttl)
        self.backoff = RestartBackoff()
        self.tiers = TierPolicy(
            TierSettings(poll_warm=settings.poll_warm, poll_cold=settings.poll_cold)
        )
        self.recent_users = RecentUsers(self.tiers.settings.user_active_window)
        self.restarts: DueScheduler[str] = DueScheduler()
        self.polls: DueScheduler[str] = DueScheduler()
        self._attempts: dict[str, int] = {}
        self._live: dict[str, int] | None = None
        self._next_fleet = 0.0
        self._last_fleet = float("-inf")
        self._next_chores = 0.0
        self._wake_at = 0.0
        self._next_metrics = 0.0
        self.reader = DirectoryReader(self.directory, self.tell)
        self.hooks = SupervisedWatchHooks(syncer, self.metrics, self.tell)
        self.watches = WatchManager(
            self.hooks,
            pool_size=settings.watch_pool,
            reidle_after=settings.reidle_after,
            dead_after=settings.dead_after,
        )
        self.prewarmer = Prewarmer(
            settings.worker_id,
            lease,
            self.watches,
            ttl=settings.lease_ttl,
            capacity=settings.max_accounts_per_worker,
        )
        self.poller = Poller(
            syncer.sync,
            concurrency=settings.poll_concurrency,
            deadline_seconds=settings.poll_deadline,
        )

    # --- from other threads ----------------------------------------------------------

    def tell(self, news: tuple[Any, ...]) -> None:
        self._news.put(news)
        self._wake.set()

    def on_signal(self, signal: Signal) -> None:
        self.tell(("signal", signal))

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event, on_turn: Callable[[], None] = lambda: None) -> None:
        log.info("worker.start worker_id=%s", self.settings.worker_id)
        try:
            while not stop.is_set():
                self.turn()
                on_turn()
                self._wake.wait(timeout=self._sleep_time())
                self._wake.clear()
        finally:
            self.shutdown()

    def turn(self) -> None:
        now = time.monotonic()
        self._drain(now)
        if now < self._next_chores and now < self._next_fleet:
            # Woken by news alone, right after a full turn: the rest scans every held
            # account, so it runs at most every CHORES_INTERVAL (a burst of new mail in
            # thousands of watches would otherwise make each "mail" news cost O(accounts)).
            return
        self._next_chores = now + CHORES_INTERVAL
        self._renew_leases(now)
        if now >= self._next_fleet:
            self._next_fleet = now + self.settings.fleet_tick
            self._last_fleet = now
            self._fleet_tick(now)
        for account_id in self.restarts.pop_due(now):
            if self.keeper.holds(account_id) and account_id in self.directory.syncable:
                self._start_watch(account_id)
        self._start_polls(time.time())
        if now >= self._next_metrics:
            self._next_metrics = now + METRICS_INTERVAL
            self._update_metrics()
        self._wake_at = now + self._full_sleep_time(now)

    def _fleet_soon(self, now: float) -> None:
        """Claims and releases now, not at the next tick — but a burst of signals shares
        one fleet tick per FLEET_COALESCE (each tick classifies every account)."""
        self._next_fleet = min(self._next_fleet, max(now, self._last_fleet + FLEET_COALESCE))

    def _sleep_time(self) -> float:
        return max(min(self._wake_at, self._next_fleet) - time.monotonic(), 0.01)

    def _full_sleep_time(self, now: float) -> float:
        candidates = [self._next_fleet - now, 1.0]
        wakeup = self.keeper.next_wakeup()
        if wakeup is not None:
            candidates.append(wakeup - now)
        for scheduler, clock in ((self.restarts, now), (self.polls, time.time())):
            due = scheduler.next_due()
            if due is not None:
                candidates.append(due - clock)
        return max(min(candidates), 0.01)

    # --- news --------------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        while True:
            try:
                news = self._news.get_nowait()
            except queue.Empty:
                return
            kind = news[0]
            if kind == "signal":
                self._signal(news[1], now)
            elif kind == "watch_stopped":
                self._watch_stopped(*news[1:], now=now)
            elif kind == "mail":
                self.tiers.on_mail(news[1], time.time(), time.time())
                self._on_ingested()
            elif kind == "polled":
                self._polled(news[1])
            elif kind == "directory":
                self._directory_fetched(news[1], now)
            elif kind == "looked_up":
                self._looked_up(news[1], news[2], now)

    def _signal(self, signal: Signal, now: float) -> None:
        wall = time.time()
        if signal.kind == "user_active" and signal.user_id is not None:
            self.recent_users.seen(signal.tenant_id, signal.user_id, wall)
            self.tiers.on_user_active(
                self.directory.of_user(signal.tenant_id, signal.user_id), wall
            )
        elif signal.account_id is not None:
            self.reader.lookup(signal.account_id)  # acted on in ``_looked_up``
            return
        self._fleet_soon(now)  # claims and releases now, not at the next tick

    def _looked_up(self, account_id: str, info: AccountInfo | None, now: float) -> None:
        self.directory.learn(account_id, info)
        self.hooks.changed(account_id)
        if info is None:
            self._forget(account_id, "deactivated")
            return
        wall = time.time()
        self.tiers.on_user_active([account_id], wall)
        self.polls.schedule(account_id, wall)
        self._fleet_soon(now)

    def _directory_fetched(self, fresh: dict[str, AccountInfo] | None, now: float) -> None:
        self.reader.refreshed()
        if fresh is None:
            return
        self.directory.apply(fresh)
        wall = time.time()
        known = self.directory.syncable
        for account_id in self.tiers.tracked() - known.keys():
            self._forget(account_id, "deactivated")
        self.recent_users.prune(wall)
        tracked = self.tiers.tracked()
        new = [(a, info) for a, info in known.items() if a not in tracked]
        for account_id, info in new:
            self.tiers.track(account_id, wall)
            # A user-active that came before this worker knew the account counts.
            active = self.recent_users.last_active(
                info.tenant_id, info.owner_user_id, info.scope == "shared"
            )
            if active != NEVER:
                self.tiers.on_user_active([account_id], active)
            # First sight: poll soon, spread so a restart does not log in everywhere
            # at once (a fixed spread per account: no RNG needed).
            self.polls.schedule(account_id, wall + (zlib.crc32(account_id.encode()) % 2000) / 1000)
        if new:
            self._fleet_soon(now)  # claim the new hot ones now

    def _watch_stopped(
        self, account_id: str, reason: str, error: BaseException | None, lived: float, *, now: float
    ) -> None:
        self.prewarmer.forget(account_id)
        generation = self._attempts.pop(account_id, None)
        if reason in QUIET_STOPS or generation is None:
            if self.keeper.holds(account_id) and not self.watches.is_watching(account_id):
                # The lease is ours and nothing watches: a parked session closed as
                # unclaimed just as its lease was won (``_start_watch`` saw it still
                # there and started nothing). Nothing else would ever start the watch.
                self._start_watch(account_id)
            return
        if reason == "auth":
            self._forget(account_id, "auth_error")
            return
        if lived > 0:
            self.backoff.connected(account_id, generation, now - lived)
        retry_after = error.retry_after if isinstance(error, MailboxThrottled) else None
        restart = self.backoff.failed(account_id, generation, now, retry_after=retry_after)
        if restart is not None and self.keeper.holds(account_id):
            self.restarts.schedule(account_id, restart.at)
            log.info(
                "watch.backoff account_id=%s reason=%s delay=%.1f",
                account_id,
                reason,
                restart.delay,
            )

    def _polled(self, outcome: SyncOutcome) -> None:
        if outcome.ingested:
            self.metrics.ingested.labels("poll").inc(outcome.ingested)
            self.tiers.on_mail(outcome.account_id, time.time(), time.time())
            self._on_ingested()
        if outcome.error_kind is not None:
            self.metrics.poll_failures.labels(outcome.error_kind).inc()
        if outcome.error_kind == "auth":
            self._forget(outcome.account_id, "auth_error")

    # --- leases and the fleet ------------------------------------------------------------

    def _teardown(self, teardowns: list[Teardown]) -> None:
        for t in teardowns:
            self.metrics.leases_lost.labels(t.reason).inc()
            log.warning("lease.%s account_id=%s", t.reason, t.account_id)
            self._stop_watch(t.account_id, t.reason)

    def _renew_leases(self, now: float) -> None:
        self._teardown(self.keeper.expired(now))
        if not self.keeper.due(now):
            return
        batch = self.keeper.start_renewal(now)
        try:
            results = self.lease.renew_many(batch.tokens)
        except LeaseBackendUnavailable:
            self._teardown(self.keeper.on_renew_failed(batch, time.monotonic()))
            return
        self.metrics.leases_renewed.inc(sum(results.values()))
        self._teardown(self.keeper.on_renew_results(batch, results))

    def _fleet_tick(self, now: float) -> None:
        wall = time.time()
        self.reader.refresh()  # the answer comes back as news ("directory")
        try:
            self.registry.heartbeat(len(self.keeper))
            self._live = self.registry.live_workers()
        except LeaseBackendUnavailable:
            self._live = None
            return  # no claims without the lease backend; polls go on
        live = self._live or {self.settings.worker_id: len(self.keeper)}
        budget = self.settings.hot_budget_per_worker * max(len(live), 1)
        hot = {a for a, tier in self.tiers.classify(wall, budget).items() if tier == "hot"}
        mine = set(self.keeper.held_accounts() | self.keeper.pending_accounts())
        try:
            taken = self.lease.held(hot - mine)
        except LeaseBackendUnavailable:
            return
        # Live holders renew every ttl/3, so a lease this close to lapsing has a holder
        # that died: look again the moment it lapses, not up to a tick later (failover).
        lapsing = [left for left in taken.values() if left < self.settings.fleet_tick]
        if lapsing:
            self._next_fleet = min(self._next_fleet, now + min(lapsing) + FLEET_COALESCE)
        plan = fleet.plan(
            self.settings.worker_id,
            live_workers=live,
            hot=hot,
            mine=mine,
            taken=set(taken),
            capacity=self.settings.max_accounts_per_worker,
        )
        for account_id in plan.release:
            self._stop_watch(account_id, "released")
        for account_id in plan.claim:
            self._claim(account_id)
        self.prewarmer.update(
            live, hot, self.keeper.held_accounts() | self.keeper.pending_accounts(), taken
        )

    def _claim(self, account_id: str) -> None:
        claim = self.keeper.claim(account_id)
        if claim is None:
            return
        sent_at = time.monotonic()
        try:
            token = self.lease.acquire(account_id)
        except LeaseBackendUnavailable:
            self.keeper.on_acquire_failed(claim)
            return
        if token is None:
            self.keeper.on_acquire_failed(claim)
        elif self.keeper.on_acquired(claim, token, sent_at):
            self._start_watch(account_id)
        else:
            self._release(account_id, token)

    def _start_watch(self, account_id: str) -> None:
        if not self.prewarmer.take(account_id):  # else opened ahead: only IDLE was left
            if self.watches.is_watching(account_id):
                return
            self.watches.start(account_id)
        self._attempts[account_id] = self.backoff.begin(account_id)
        # Its catch-up right after login is a poll: the next one is a full interval away
        # (a poll due now would log in a second time, doubling a mass start's logins).
        wall = time.time()
        self.polls.schedule(account_id, self.tiers.next_poll_at("hot", wall))

    def _stop_watch(self, account_id: str, reason: str) -> None:
        """Stop the watch (if any) and give its lease back (if still ours)."""
        self.restarts.cancel(account_id)
        self.backoff.cancel(account_id)
        self.watches.stop(account_id, reason)
        token = self.keeper.stop(account_id)
        if token is not None:
            self._release(account_id, token)

    def _release(self, account_id: str, token: str) -> None:
        with contextlib.suppress(LeaseBackendUnavailable):
            self.lease.release(account_id, token)

    def _forget(self, account_id: str, reason: str) -> None:
        self._stop_watch(account_id, reason)
        self.polls.cancel(account_id)
        self.tiers.untrack(account_id)
        self.backoff.forget(account_id)
        self.directory.forget(account_id)

    # --- polls ---------------------------------------------------------------------------

    def _owns_poll(self, account_id: str) -> bool:
        if self.keeper.holds(account_id):
            return True  # hot: the lease holder runs the secondary poll
        if not self._live:
            return True  # fleet unknown (e.g. Redis down): poll anyway, dedup keeps it safe
        return fleet.poll_owner(account_id, self._live.keys()) == self.settings.worker_id

    def _start_polls(self, wall: float) -> None:
        tiers = None
        for account_id in self.polls.pop_due(wall):
            if account_id not in self.directory.syncable:
                continue
            if tiers is None:
                tiers = self.tiers.classify(wall, self.settings.hot_budget_per_worker)
            tier = tiers.get(account_id, "warm")
            self.polls.schedule(account_id, self.tiers.next_poll_at(tier, wall))
            if self._owns_poll(account_id):
                self.poller.submit(account_id, lambda outcome: self.tell(("polled", outcome)))

    # --- metrics and shutdown -------------------------------------------------------------

    def _update_metrics(self) -> None:
        self.metrics.accounts_owned.set(len(self.keeper))
        states: dict[str, int] = {}
        for state in self.watches.watching().values():
            states[state] = states.get(state, 0) + 1
        for state in ("opening", "parked", "idling", "fetching", "refreshing"):
            self.metrics.watchers.labels(state).set(states.get(state, 0))

    def shutdown(self) -> None:
        """Graceful stop: watches closed, leases released, heartbeat withdrawn."""
        log.info("worker.stop worker_id=%s", self.settings.worker_id)
        tokens = self.keeper.stop_all()
        self.watches.close()
        self.hooks.close()
        with contextlib.suppress(LeaseBackendUnavailable):
            if tokens:
                self.lease.release_many(tokens)
        with contextlib.suppress(LeaseBackendUnavailable):
            self.registry.leave()
        self.poller.close()
        self.reader.close()
