"""The watch supervisor: one worker process's loop.

A thin loop over small policies (``workers.policies``): all policy state is touched by
the loop thread only. Other threads — the signal subscriber, watch and poll pools, the
directory reader — hand their news (``workers.news``) to the inbox and wake the loop.
The composition root builds every collaborator and passes it in.

The loop itself never waits for the database: the account directory is read on a thread
of its own (``DirectoryReader``) and the watch report written on another
(``WatchStatusWriter``) — a database outage must not hold up lease renewals (the leases
would lapse) nor signals.

Which watches exist, and the leases behind them, is the ``WatchOwner``'s alone: the
supervisor asks it to claim, stop, restart or park, and never touches a watch itself.

Each turn:
1. drain news: signals (account changed, sync now, user active), watch stops, polls done,
   directory answers (a refresh from the read model, an account looked up for a signal);
2. leases: stop watches whose lease expired; renew held leases when due
   ("not yours" -> stop that watch now);
3. fleet tick (every ``fleet_tick`` s, or at once after a signal): ask for a directory
   refresh (with the fleet's shared tier state: ``workers.shared_tiers``) when the last
   one is a ``fleet_tick`` old, heartbeat (from the first directory answer on),
   classify tiers, plan claims/releases, acquire leases and start watches for claims,
   stop watches and release leases for releases; park sessions for a dead worker's
   accounts this worker will claim once their leases lapse, starting when this worker's
   measured login rate says they must (a tick is run then), and, while this worker is
   short of its share (it just joined), at once for the accounts the others are about
   to give back to it (``policies.handover``; ticks come sooner until they do); report
   watch states and tiers;
4. restart watches whose backoff ran out (same lease, new generation);
5. start due polls this worker owns (``fleet.owns_poll``); a watch's news of changed
   folders (NOTIFY) brings its account's poll forward (``policies.folder_news``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from application.leases import LeaseBackendUnavailable, WorkerRegistry
from application.mail.state import ErrorKind
from application.mail.sync_outcome import SyncOutcome
from application.signals import Signal
from workers import news
from workers.account_info import AccountInfo, SharedActivity
from workers.collaborators import Ingest, Polls, Reader, Report
from workers.directory import AccountDirectory
from workers.metrics import WorkerMetrics
from workers.news import Inbox, WatchStopped
from workers.policies import failover, fleet, watch_report
from workers.policies.folder_news import FolderNews
from workers.policies.scheduling import DueScheduler, first_poll_at
from workers.policies.tiers import NEVER, RecentUsers, Tier, TierPolicy, TierSettings
from workers.policies.watch_stops import AfterStop, StopReason, WhyStopped
from workers.poll_schedule import PollStarts
from workers.supervisor_settings import SupervisorSettings
from workers.watch_owner import WatchOwner

log = logging.getLogger("tidings.supervisor")

# A turn woken by news alone only drains the news; the rest of a turn (leases, restarts,
# polls) runs at most this often, and metrics at most every METRICS_INTERVAL.
CHORES_INTERVAL = 0.05
METRICS_INTERVAL = 1.0
FLEET_COALESCE = 0.05  # signals in a burst share one fleet tick
# A fleet tick claims for at most this long, then goes on at the next turn: thousands of
# claims in one tick held up the lease renewals past their margin (10,000 accounts, a
# loaded machine: 1,425 leases lost at once, their sessions still in IDLE when another
# worker took them). Claims go CLAIM_BATCH to a round trip to the lease backend (one a
# round trip was 8% of a joining worker's samples for its 2,000 claims).
CLAIM_BUDGET = 1.0
CLAIM_BATCH = 100


class Supervisor:
    def __init__(
        self,
        settings: SupervisorSettings,
        *,
        inbox: Inbox,
        registry: WorkerRegistry,
        owner: WatchOwner,
        directory: AccountDirectory,
        reader: Reader,
        ingest: Ingest,
        poller: Polls,
        status: Report,
        metrics: WorkerMetrics,
        on_ingested: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.inbox = inbox
        self.registry = registry
        self.owner = owner
        self.directory = directory
        self.reader = reader
        self.ingest = ingest
        self.status = status
        self.metrics = metrics
        self._on_ingested = on_ingested
        self.tiers = TierPolicy(
            TierSettings(
                poll_warm=settings.poll_warm,
                poll_cold=settings.poll_cold,
                hot_budget_per_worker=settings.hot_budget_per_worker,
            )
        )
        self.recent_users = RecentUsers(self.tiers.settings.user_active_window)
        self.polls: DueScheduler[str] = DueScheduler()
        self.folder_news = FolderNews(self.polls)
        self.poll_starts = PollStarts(
            settings.worker_id,
            polls=self.polls,
            tiers=self.tiers,
            poller=poller,
            folder_news=self.folder_news,
            holds_lease=owner.holds,
            syncable=lambda: self.directory.syncable,
            done=self._poll_done,
        )
        self._next_fleet = 0.0
        self._last_fleet = float("-inf")
        self._next_directory = 0.0
        # No heartbeat before the first directory answer: the heartbeat is what makes the
        # others give this worker its share, and only with the directory can it park
        # sessions for what they give (``policies.handover``) before they do.
        self._directory_known = False
        self._next_chores = 0.0
        self._wake_at = 0.0
        self._next_metrics = 0.0

    @property
    def poller(self) -> Polls:
        return self.poll_starts.poller

    @poller.setter
    def poller(self, poller: Polls) -> None:  # the one the poll starts submit to
        self.poll_starts.poller = poller

    # --- from other threads ----------------------------------------------------------

    def on_signal(self, signal: Signal) -> None:
        self.inbox.tell(news.SignalReceived(signal))

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event, on_turn: Callable[[], None] = lambda: None) -> None:
        log.info("worker.start worker_id=%s", self.settings.worker_id)
        try:
            while not stop.is_set():
                self.turn()
                on_turn()
                self.inbox.wait(self._sleep_time())
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
        self.owner.renew(now)
        if now >= self._next_fleet:
            self._next_fleet = now + self.settings.fleet_tick
            self._last_fleet = now
            self._fleet_tick(now)
        for account_id in self.owner.restart_due(now, self.directory.syncable.keys()):
            self._watch_started(account_id)
        self.poll_starts.start_due(time.time())
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
        # With every poll slot taken, a poll's end (``PollDone``) wakes the loop instead.
        next_poll = self.polls.next_due() if self.poller.free_slots() else None
        for due, clock in ((self.owner.next_wakeup(), now), (next_poll, time.time())):
            if due is not None:
                candidates.append(due - clock)
        return max(min(candidates), 0.01)

    # --- news --------------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        for item in self.inbox.drain():
            match item:
                case news.SignalReceived(signal):
                    self._signal(signal, now)
                case news.WatchStopped():
                    self._watch_stopped(item, now)
                case news.MailSeen(account_id):
                    self.tiers.on_mail(account_id, time.time(), time.time())
                    self._on_ingested()
                case news.FoldersChanged(account_id):
                    self.folder_news.heard(account_id, time.time())
                case news.PollDone(outcome):
                    self._polled(outcome)
                    self._wake_at = min(self._wake_at, self._next_chores)  # a slot is free
                case news.DirectoryFetched(accounts, activity):
                    self._directory_fetched(accounts, now)
                    if accounts is not None and activity is not None:
                        self._shared_tiers(activity, now)
                case news.AccountLookedUp(account_id, info):
                    self._looked_up(account_id, info, now)
                # ``news.Wake``: nothing to do but look at the stop flag

    def _signal(self, signal: Signal, now: float) -> None:
        if signal.kind == "outbound_queued":
            return  # the outbox thread's (``workers.outbound``)
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
        self.ingest.changed(account_id)
        if info is None:
            self._forget(account_id, StopReason.DEACTIVATED)
            return
        wall = time.time()
        self.tiers.on_user_active([account_id], wall)
        self.polls.schedule(account_id, wall)
        self._fleet_soon(now)

    def _directory_fetched(self, fresh: dict[str, AccountInfo] | None, now: float) -> None:
        self.reader.refreshed()
        if fresh is None:
            return
        self._directory_known = True
        self.directory.apply(fresh)
        wall = time.time()
        known = self.directory.syncable
        for account_id in self.tiers.tracked() - known.keys():
            self._forget(account_id, StopReason.DEACTIVATED)
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
            self.polls.schedule(account_id, first_poll_at(account_id, wall))
        if new:
            self._fleet_soon(now)  # claim the new hot ones now

    def _shared_tiers(self, activity: SharedActivity, now: float) -> None:
        """The fleet's shared tier state (user activity, recent mail), read with the
        directory: a restarted worker knows at once which accounts were hot."""
        if self.tiers.learn(activity.user_active, activity.mail, time.time()):
            self._fleet_soon(now)  # claim what became hot now, not a tick later

    def _watch_stopped(self, stopped: WatchStopped, now: float) -> None:
        decision, started = self.owner.stopped(stopped, now)
        if started:
            self._watch_started(stopped.account_id)
        if decision is AfterStop.FORGET:
            self._forget(stopped.account_id, StopReason.AUTH_ERROR)

    def _polled(self, outcome: SyncOutcome) -> None:
        self.folder_news.finished(outcome.account_id, time.time())
        if outcome.listed and self.settings.folder_notify:  # pushed folders may differ
            self.owner.refresh_folders(outcome.account_id)
        if outcome.ingested:
            self.metrics.ingested.labels("poll").inc(outcome.ingested)
            self.tiers.on_mail(outcome.account_id, time.time(), time.time())
            self._on_ingested()
        if outcome.error_kind is not None:
            self.metrics.poll_failures.labels(outcome.error_kind).inc()
        if outcome.error_kind == ErrorKind.AUTH:
            self._forget(outcome.account_id, StopReason.AUTH_ERROR)

    # --- leases and the fleet ------------------------------------------------------------

    def _fleet_tick(self, now: float) -> None:
        wall = time.time()
        if now >= self._next_directory:
            self._next_directory = now + self.settings.fleet_tick
            self.reader.refresh()  # the answer comes back as news (``DirectoryFetched``)
        try:
            if self._directory_known:
                self.registry.heartbeat(len(self.owner), self.owner.login_rate())
            self.poll_starts.live = self.registry.live_workers()
        except LeaseBackendUnavailable:
            self.poll_starts.live = None
        live = self.poll_starts.live or {self.settings.worker_id: len(self.owner)}
        tiers = self.poll_starts.tiers = self.tiers.classify(wall, self.poll_starts.hot_budget())
        try:
            # No claims without the lease backend; polls go on.
            if self.poll_starts.live is not None:
                self._plan_fleet(now, live, {a for a, tier in tiers.items() if tier == "hot"})
        finally:
            self._report(tiers)

    def _plan_fleet(self, now: float, live: dict[str, int], hot: set[str]) -> None:
        mine = set(self.owner.mine())
        try:
            taken, holders = self.owner.taken_by(hot - mine)
        except LeaseBackendUnavailable:
            self.poll_starts.held_elsewhere = {}
            return
        self.poll_starts.held_elsewhere = taken  # their holders poll them
        early = failover.look_again_at(
            taken.values(), now, fleet_tick=self.settings.fleet_tick, margin=FLEET_COALESCE
        )
        sight = failover.first_sight_at(
            taken.values(),
            now,
            ttl=self.settings.lease_ttl,
            fleet_tick=self.settings.fleet_tick,
            rate=self.owner.login_rate(),
            margin=FLEET_COALESCE,
        )
        for at in (early, sight):
            if at is not None:
                self._next_fleet = min(self._next_fleet, at)
        plan = fleet.plan(
            self.settings.worker_id,
            live_workers=live,
            hot=hot,
            mine=mine,
            taken=set(taken),
            capacity=self.settings.max_accounts_per_worker,
        )
        for account_id in plan.release:
            self.owner.stop(account_id, StopReason.RELEASED)
        stop_at = time.monotonic() + CLAIM_BUDGET
        for start in range(0, len(plan.claim), CLAIM_BATCH):
            if time.monotonic() > stop_at:
                self._fleet_soon(time.monotonic())  # the rest after the next renewals
                break
            for account_id in self.owner.claim_many(plan.claim[start : start + CLAIM_BATCH]):
                self._watch_started(account_id)
        if plan.claim or plan.release:
            # The others plan with this count: the one sent at the tick's start is a tick
            # stale after these claims and releases, and a plan made with it gives this
            # worker's room to others (in a failover, parked sessions were closed as
            # unclaimed and their accounts watched a tick and a login later).
            with contextlib.suppress(LeaseBackendUnavailable):
                self.registry.heartbeat(len(self.owner), self.owner.login_rate())
        logins_due = self.owner.park(now, live, hot, taken, holders)
        if logins_due is not None:  # a dead worker's accounts: their logins start then
            self._next_fleet = min(self._next_fleet, logins_due)

    def _report(self, tiers: dict[str, Tier]) -> None:
        held = self.owner.held()
        self.status.report(
            watch_report.statuses(
                tiers,
                held=held,
                watching={a for a in held if self.owner.is_watching(a)},
                backing_off={a for a in held if self.owner.backing_off(a)},
                owns_poll=self.poll_starts.owns_poll,
            )
        )

    def _watch_started(self, account_id: str) -> None:
        # Its catch-up right after login is a poll: the next one is a full interval away
        # (a poll due now would log in a second time, doubling a mass start's logins).
        self.polls.schedule(account_id, self.tiers.next_poll_at("hot", time.time()))

    def _forget(self, account_id: str, reason: WhyStopped) -> None:
        self.owner.forget(account_id, reason)
        self.polls.cancel(account_id)
        self.folder_news.forget(account_id)
        self.tiers.untrack(account_id)
        self.directory.forget(account_id)

    # --- polls ---------------------------------------------------------------------------

    def _poll_done(self, outcome: SyncOutcome) -> None:  # a poll thread
        self.inbox.tell(news.PollDone(outcome))

    # --- metrics and shutdown -------------------------------------------------------------

    def _update_metrics(self) -> None:
        self.metrics.watches_seen(
            owned=len(self.owner),
            states=self.owner.watch_states().values(),
            probes=self.owner.take_probe_counts(),
            login_rate=self.owner.login_rate(),
        )

    def shutdown(self) -> None:
        """Graceful stop: watches closed, leases released, heartbeat withdrawn, the watch
        report cleared."""
        log.info("worker.stop worker_id=%s", self.settings.worker_id)
        self.owner.close()
        self.ingest.close()
        with contextlib.suppress(LeaseBackendUnavailable):
            self.registry.leave()
        self.poller.close()
        self.reader.close()
        self.status.close()
