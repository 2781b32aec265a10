"""The composition root's worker half: one account's sync, a worker's supervisor and its
collaborators, the webhook delivery loop. ``bootstrap()`` builds the ``App`` they run on."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from dataclasses import replace

from application import worker_defaults as defaults
from application.app import App
from application.context import Context
from application.feed.read_feed import served_item
from application.leases import LeaseBackend, WorkerRegistry
from application.mail.account_sync import AccountSync, SyncSettings
from application.mail.completion import BodyCompletion
from application.mail.flag_mirror import FlagMirror
from application.mail.flag_state import FlagWindow
from application.mail.folder_events import FolderEvents
from application.mail.folder_sync import FolderSync, FolderSyncSettings
from application.mail.ingestion import MailIngestion
from application.mail.membership import MembershipPass
from application.mail.outbound.delivery import DeliverySettings, OutboundDelivery
from application.signals import Signal, SignalSubscriber
from application.webhooks.delivery_ports import DeliveryQueue
from domain.webhook import RetryPolicy
from infrastructure.bootstrap import provider_table
from infrastructure.in_process.lease import InProcessLease
from infrastructure.in_process.registry import LocalRegistry
from infrastructure.mime.parser import EmailMimeParser
from infrastructure.redis.lease import RedisLease
from infrastructure.redis.registry import RedisFleet
from infrastructure.redis.signals import RedisSignals
from infrastructure.runtime.settings import Settings
from infrastructure.smtp.kept import KeptConnections
from infrastructure.smtp.submission import SmtpSubmitter
from infrastructure.sql.flag_state import SqlFlagState
from infrastructure.webhooks.deliveries import SqlDeliveryQueue
from infrastructure.webhooks.sender import HttpSender
from infrastructure.webhooks.store import SqlWebhookStore
from projections.runner import ProjectionRunner
from workers.caps import CappedProvider, ConnectionCaps
from workers.directory import AccountDirectory, DirectoryReader
from workers.metrics import CountingProvider, WorkerMetrics
from workers.news import Inbox
from workers.outbound import OutboxWake, run_outbound
from workers.parking import ParkedSessions
from workers.policies.webhook_lanes import LaneSettings
from workers.poll import Poller
from workers.shared_tiers import SharedTierState
from workers.supervisor import Supervisor
from workers.supervisor_settings import SupervisorSettings
from workers.watch import WatchManager
from workers.watch_ingest import WatchIngest, watch_committer
from workers.watch_owner import WatchOwner
from workers.watch_status import WatchStatusWriter
from workers.webhooks.dispatcher import DeliveryPorts, Dispatcher, DispatchSettings
from workers.webhooks.metrics import WebhookMetrics


def build_syncer(app: App, settings: Settings) -> AccountSync:
    """One account's sync (the poll's unit of work), wired to the app's ports."""
    return account_sync(app.ctx, settings)


def account_sync(ctx: Context, settings: Settings) -> AccountSync:
    """``AccountSync`` on ``ctx``'s ports, with a MIME parser, ingestion and completion."""
    ingestion = MailIngestion(
        ctx, EmailMimeParser(ctx.mail.blobs), parse_concurrency=settings.parse_concurrency
    )
    completion = BodyCompletion(ctx, ingestion.read_bodies)
    store = ctx.mail.flags
    flags = FlagMirror(ctx, store, FlagWindow()) if store is not None else None
    folders = None
    if ctx.mail.folders is not None:
        folder_settings = FolderSyncSettings(
            list_interval=settings.folder_list_interval,
            backfill_window_days=settings.backfill_window_days,
            max_messages_per_poll=settings.max_messages_per_poll,
        )
        events = FolderEvents(ctx.store, ctx.clock)
        folders = FolderSync(
            ctx, ingestion, ctx.mail.folders, folder_settings, on_listed=events.record
        )
    membership = MembershipPass(ctx, store) if store is not None else None
    return AccountSync(
        ctx,
        ingestion,
        completion,
        sync_settings(settings),
        flags=flags,
        folders=folders,
        membership=membership,
        seen=store if isinstance(store, SqlFlagState) else None,
    )


def sync_settings(settings: Settings) -> SyncSettings:
    return SyncSettings(
        backfill_window_days=settings.backfill_window_days,
        max_messages_per_poll=settings.max_messages_per_poll,
        parse_concurrency=settings.parse_concurrency,
    )


def build_supervisor(
    app: App,
    settings: Settings,
    worker_id: str,
    on_ingested: Callable[[], None] = lambda: None,
    *,
    also_on_signal: Callable[[Signal], None] | None = None,
) -> Supervisor:
    """A worker's supervisor: Redis lease, fleet and signals when ``redis_url`` is set,
    else their in-process stand-ins (single-process mode). ``also_on_signal`` (the outbox
    thread's wake) listens on the same subscription: one signal connection a process."""
    ttl = settings.watch_lease_ttl
    # A dead worker's heartbeat lapses (ttl/2) before its leases can (2/3 ttl or more
    # after their last renewal): survivors no longer count it when its accounts come
    # free, so they claim all of them at once instead of only their fair share.
    # Heartbeats are written every fleet tick (at most ttl/6): three ticks of margin.
    heartbeat_ttl = ttl / 2
    caps = ConnectionCaps(per_host=settings.per_host_conn_cap, providers=provider_table(settings))
    metrics = WorkerMetrics()
    if isinstance(app.projections, ProjectionRunner):
        metrics.registry.register(app.projections.metrics_collector())
    counted = CountingProvider(app.ctx.mail.provider, metrics.logins.inc)
    capped = replace(
        app.ctx, mail_ports=replace(app.ctx.mail, provider=CappedProvider(counted, caps))
    )
    syncer = account_sync(capped, settings)
    lease: LeaseBackend
    registry: WorkerRegistry
    subscriber: SignalSubscriber
    if settings.redis_url:
        lease = RedisLease.from_url(settings.redis_url, ttl, holder=worker_id)
        registry = RedisFleet.from_url(settings.redis_url, worker_id, heartbeat_ttl)
        subscriber = RedisSignals.from_url(settings.redis_url)
    else:
        lease = InProcessLease(ttl, holder=worker_id)
        registry = LocalRegistry(worker_id, heartbeat_ttl)
        subscriber = app.ctx.mail.signals  # type: ignore[assignment]
    supervisor_settings = SupervisorSettings(
        worker_id=worker_id,
        lease_ttl=ttl,
        fleet_tick=min(defaults.FLEET_TICK, ttl / 6),
        poll_warm=settings.poll_interval,
        poll_cold=settings.poll_cold,
        poll_concurrency=settings.poll_concurrency,
        poll_deadline=settings.poll_deadline,
        watch_login_pool=settings.watch_login_pool,
        max_accounts_per_worker=settings.max_accounts_per_worker,
        hot_budget_per_worker=settings.hot_budget_per_worker,
        probe_after=settings.watch_probe_after,
        probe_timeout=settings.watch_probe_timeout,
        folder_notify=settings.folder_notify,
    )
    supervisor = _supervisor(
        app,
        syncer,
        lease=lease,
        registry=registry,
        settings=supervisor_settings,
        metrics=metrics,
        on_ingested=on_ingested,
    )
    subscriber.subscribe(supervisor.on_signal)
    if also_on_signal is not None:
        subscriber.subscribe(also_on_signal)
    return supervisor


def _supervisor(
    app: App,
    syncer: AccountSync,
    *,
    lease: LeaseBackend,
    registry: WorkerRegistry,
    settings: SupervisorSettings,
    metrics: WorkerMetrics,
    on_ingested: Callable[[], None],
) -> Supervisor:
    """The supervisor and every collaborator it is given (the news inbox first: the
    threads that tell it things are built with its ``tell``). Without ``folder_notify``
    the watches are given no folder state: they ask for no folders to be pushed."""
    inbox = Inbox()
    directory = AccountDirectory(app.ctx.mail.read_model, app.ctx.store)
    committer = watch_committer(syncer)
    folders = app.ctx.mail.folders if settings.folder_notify else None
    ingest = WatchIngest(syncer, committer, metrics, inbox.tell, folders=folders)
    watches = WatchManager(
        ingest,
        pool_size=settings.watch_pool,
        login_pool_size=settings.watch_login_pool,
        reidle_after=settings.reidle_after,
        probe_after=settings.probe_after,
        probe_timeout=settings.probe_timeout,
    )
    parking = ParkedSessions(
        settings.worker_id,
        lease,
        ttl=settings.lease_ttl,
        capacity=settings.max_accounts_per_worker,
        login_rate=watches.login_rate,
    )
    return Supervisor(
        settings,
        inbox=inbox,
        registry=registry,
        owner=WatchOwner(lease, watches, parking, metrics, ttl=settings.lease_ttl),
        directory=directory,
        reader=DirectoryReader(
            directory,
            inbox.tell,
            shared=SharedTierState(app.ctx.mail.activity, app.ctx.mail.read_model).read,
        ),
        ingest=ingest,
        poller=Poller(
            syncer.sync,
            concurrency=settings.poll_concurrency,
            deadline_seconds=settings.poll_deadline,
        ),
        status=WatchStatusWriter(app.ctx.mail.state, settings.worker_id),
        metrics=metrics,
        on_ingested=on_ingested,
    )


def build_webhook_dispatcher(
    app: App, settings: Settings, holder: str, metrics: WebhookMetrics | None = None
) -> Dispatcher:
    """The webhook delivery loop of one process (``tidings worker``, ``webhooks run``)."""
    s = settings
    retry = RetryPolicy(s.webhook_retry_first, s.webhook_retry_longest, s.webhook_retry_budget)
    lanes = LaneSettings(
        s.webhook_pool, s.webhook_slow_pool, s.webhook_per_host, s.webhook_per_tenant
    )
    dispatch = DispatchSettings(
        s.webhook_timeout, retry, lanes, s.webhook_interval, lease_ttl=s.webhook_lease_ttl
    )
    return webhook_dispatcher(
        app, dispatch, holder, allow_private=s.allow_private_hosts, metrics=metrics
    )


def webhook_dispatcher(
    app: App,
    settings: DispatchSettings,
    holder: str,
    *,
    allow_private: bool,
    metrics: WebhookMetrics | None = None,
    deliveries: DeliveryQueue | None = None,
) -> Dispatcher:
    """A delivery loop over ``app``'s webhook tables, feed and key ring."""
    store, ctx = app.ctx.webhooks, app.ctx
    if not isinstance(store, SqlWebhookStore):
        raise TypeError("this App was not built by bootstrap()")
    ports = DeliveryPorts(
        deliveries=deliveries or SqlDeliveryQueue(store.db),
        feed=ctx.feed,
        serve=lambda row: served_item(ctx, row),
        projections=app.projections,
        cipher=ctx.cipher,
        sender=HttpSender(timeout=settings.timeout, allow_private=allow_private),
    )
    return Dispatcher(ports, settings=settings, holder=holder, metrics=metrics or WebhookMetrics())


def build_outbound_delivery(app: App, settings: Settings, holder: str) -> OutboundDelivery:
    """The outbox's delivery in one worker: SMTP with the IMAP path's token refresh,
    connections kept between an account's messages, a slot per host (the provider's cap,
    else ``per_host_conn_cap``) for each connection, busy or kept."""
    context = None
    if settings.smtp_ca_file is not None:
        context = ssl.create_default_context(cafile=str(settings.smtp_ca_file))
    providers = provider_table(settings)
    connections = KeptConnections(
        lambda host: providers.conn_cap(host, settings.per_host_conn_cap),
        max_kept=settings.send_kept_connections,
        idle_seconds=settings.send_idle_seconds,
    )
    submitter = SmtpSubmitter(
        token_provider=app.ctx.mail.token_provider,
        ssl_context=context,
        connections=connections,
    )
    return OutboundDelivery(
        app.ctx,
        submitter,
        DeliverySettings(
            holder=holder,
            attempt_timeout=settings.send_attempt_timeout,
            retry_first=settings.send_retry_first,
            retry_longest=settings.send_retry_longest,
            retry_budget=settings.send_retry_budget,
            imap_timeout=settings.imap_read_timeout,
            connections_per_account=settings.send_connections_per_account,
        ),
    )


def outbox_signals(app: App, settings: Settings, callback: Callable[[Signal], None]) -> None:
    """Subscribe ``callback`` to the signals (``outbound_queued`` wakes the outbox thread):
    Redis's across the fleet, else the app's in-process bus."""
    subscriber: SignalSubscriber
    if settings.redis_url:
        subscriber = RedisSignals.from_url(settings.redis_url)
    else:
        subscriber = app.ctx.mail.signals  # type: ignore[assignment]
    subscriber.subscribe(callback)


def start_outbox(
    app: App, settings: Settings, holder: str, stop: threading.Event, interval: float
) -> tuple[threading.Thread, threading.Event]:
    """An outbox thread (``run_outbound``) woken by ``outbound_queued`` signals, started;
    answers it and the event that wakes it (set it after ``stop`` to end it at once)."""
    wake = OutboxWake()
    outbox_signals(app, settings, wake.on_signal)
    thread = threading.Thread(
        target=run_outbound,
        args=(
            build_outbound_delivery(app, settings, holder),
            stop,
            interval,
            settings.send_concurrency,
            wake,
        ),
        name="outbound",
        daemon=True,
    )
    thread.start()
    return thread, wake.event
