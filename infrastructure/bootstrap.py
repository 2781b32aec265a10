"""The composition root: settings in, a wired ``App`` out. Nothing else wires adapters."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from application import worker_defaults as defaults
from application.app import App
from application.context import Context, MailPorts, Policy
from application.custom_fields.expiry import ValueSweep
from application.leases import LeaseBackend
from application.mail.activity import UserActivity
from application.mail.budget import ProviderBudgets
from application.mail.expiry import MailSweep
from application.mail.oauth import OAuthClient, OAuthTokens
from application.mail.providers import MB, ProviderLimits, ProviderTable
from application.ports import SqlDatabase
from application.retention.sweeper import RetentionSweeper
from application.signals import SignalBus
from domain.all_events import EVENT_CLASSES
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.crypto.keyring import KeyRing
from infrastructure.crypto.master_key import open_master_key
from infrastructure.crypto.secret_store import SMTP_SECRETS_TABLE, SqlSecretStore
from infrastructure.eventstore.codec import EventCodec
from infrastructure.eventstore.recorder import RecorderEventStore, open_recorder
from infrastructure.imap.provider import ImapMailProvider
from infrastructure.imap.settings import ImapAdapterSettings
from infrastructure.in_process.activity import InProcessActivity
from infrastructure.in_process.lease import InProcessLease
from infrastructure.in_process.signals import InProcessSignals
from infrastructure.mime.content import StreamingContentReader
from infrastructure.net_policy import DestinationCheckedProvider, ResolvingDestinationPolicy
from infrastructure.oauth.token_client import HttpTokenClient
from infrastructure.redis.activity import RedisActivity
from infrastructure.redis.lease import RedisLease
from infrastructure.redis.signals import RedisSignals
from infrastructure.runtime.clock import SystemClock
from infrastructure.runtime.settings import Settings
from infrastructure.sql.database import (
    DatabaseUrl,
    PostgresDatabase,
    SqliteDatabase,
    create_sqlite_file,
)
from infrastructure.sql.deferred_bodies import SqlDeferredBodies
from infrastructure.sql.download_budget import SqlDownloadLedger
from infrastructure.sql.flag_state import SqlFlagState
from infrastructure.sql.folder_state import SqlFolderState
from infrastructure.sql.key_usage import SqlKeyUsage
from infrastructure.sql.mailbox_state import SqlMailboxState
from infrastructure.sql.uploads import SqlUploads
from infrastructure.webhooks.store import SqlWebhookStore
from projections.base import OpensSealedValues, Projection
from projections.custom_fields import CustomFieldsProjection
from projections.custom_fields_reader import CustomFieldsReader
from projections.feed import FeedProjection
from projections.feed_reader import FeedReader
from projections.mail import MailProjection
from projections.mail_expiry_reader import MailExpiryReader
from projections.mail_outbound import MailOutboundProjection
from projections.mail_outbound_reader import OutboxReader
from projections.mail_reader import MailReader
from projections.runner import ProjectionRunner
from projections.value_expiry_reader import ValueExpiryReader

log = logging.getLogger("tidings.projections")

OAUTH_LOCK_PREFIX = "tidings:oauth-refresh:"
RETENTION_LOCK_PREFIX = "tidings:retention:"


def open_database(url: DatabaseUrl) -> SqliteDatabase | PostgresDatabase:
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        create_sqlite_file(url.sqlite_path)
        return SqliteDatabase(url.sqlite_path)
    return PostgresDatabase(url)


def open_event_store(url: DatabaseUrl) -> tuple[RecorderEventStore, Any]:
    recorder, datastore = open_recorder(url)
    return RecorderEventStore(recorder, EventCodec(EVENT_CLASSES)), datastore


def build_projections(
    db: SqlDatabase, store: RecorderEventStore, batch_size: int
) -> ProjectionRunner:
    runner = ProjectionRunner(
        db,
        store,
        [CustomFieldsProjection(), MailProjection(), FeedProjection(), MailOutboundProjection()],
        batch_size=batch_size,
    )
    runner.setup()
    with db.transaction() as cur:  # read-model columns added since the tables were made
        MailProjection().upgrade(cur, db.dialect)
        MailOutboundProjection().upgrade(cur, db.dialect)
    upgrade_custom_fields(runner, db)
    return runner


def upgrade_custom_fields(runner: ProjectionRunner, db: SqlDatabase) -> bool:
    """A custom-fields read model made before retention is rebuilt from the log at
    start-up (the value clock's set times exist nowhere else; without them the sweeper
    finds nothing). It runs under the set-up lock, so one process of a fleet does it
    while the others wait; the serving tables answer until the swap, and a start-up
    that dies half-way leaves the old tables, so the next one rebuilds again."""
    name = CustomFieldsProjection.name
    with db.reading() as cur:
        outdated = CustomFieldsProjection().predates_retention(cur, db.dialect)
    if not outdated:
        return False
    log.warning("projection.upgrade name=%s reason=predates_retention action=rebuild", name)
    runner.rebuild(name)
    log.warning("projection.upgraded name=%s", name)
    return True


def load_projections(specs: Sequence[str]) -> list[Projection]:
    """Host projections named ``module:attribute`` in the operator's settings, so that
    ``tidings projections status|run|rebuild`` and workers run them too; the attribute is
    a projection, a list of them, or a callable answering either."""
    found: list[Projection] = []
    for spec in specs:
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise ValueError(f"a host projection is named module:attribute, got {spec!r}")
        try:
            target: Any = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"host projection {spec!r} cannot be loaded: {error}") from None
        if callable(target) and not hasattr(target, "apply"):
            target = target()
        found.extend(target if isinstance(target, list | tuple) else [target])
    return found


def register_host_projections(
    runner: ProjectionRunner, mail: MailPorts, projections: Sequence[Projection]
) -> None:
    for projection in projections:
        if isinstance(projection, OpensSealedValues):
            projection.use_cipher(mail.cipher)
    runner.register(projections)


def imap_settings(settings: Settings) -> ImapAdapterSettings:
    mib = 1024 * 1024
    return ImapAdapterSettings(
        read_timeout=settings.imap_read_timeout,
        operation_timeout=settings.imap_read_timeout,
        stream_threshold_bytes=int(settings.stream_parse_mb * mib),
        max_message_bytes=int(settings.max_message_mb * mib),
    )


def provider_table(settings: Settings) -> ProviderTable:
    """The built-in providers with the operator's ``provider_limits`` in front."""
    return ProviderTable(
        ProviderLimits(
            entry.name,
            (host,),
            conn_cap=entry.conn_cap,
            daily_budget_bytes=None
            if entry.daily_budget_mb is None
            else max(1, int(entry.daily_budget_mb * MB)),
            daily_send_limit=entry.daily_send_limit,
            send_connections=entry.send_connections,
            saves_sent=entry.saves_sent,
        )
        for host, entry in settings.provider_limits.items()
    )


def build_mail_ports(
    settings: Settings, db: SqlDatabase, closers: list[Callable[[], None]]
) -> MailPorts:
    """The mail adapters; what holds a connection of its own goes into ``closers``."""
    keys = KeyRing(
        db,
        open_master_key(
            db,
            settings.master_key.get_secret_value() if settings.master_key else None,
            settings.blob_dir,
        ),
    )
    keys.setup()
    blobs = FilesystemBlobStore(
        settings.blob_dir, account_key=keys.account_key, body_keys=keys.bodies
    )
    state = SqlMailboxState(db)
    state.setup()
    folders = SqlFolderState(db)
    folders.setup()
    deferred = SqlDeferredBodies(db)
    deferred.setup()
    flag_state = SqlFlagState(db)
    flag_state.setup()
    secrets = SqlSecretStore(db, keys)
    secrets.setup()
    smtp_secrets = SqlSecretStore(db, keys, SMTP_SECRETS_TABLE)
    smtp_secrets.setup()
    destinations = ResolvingDestinationPolicy(allow_private=settings.allow_private_hosts)
    ledger = SqlDownloadLedger(db)
    ledger.setup()
    uploads = SqlUploads(db, blobs)
    uploads.setup()
    budgets = ProviderBudgets(provider_table(settings), ledger, SystemClock().now)
    signals: SignalBus
    activity: UserActivity
    if settings.redis_url:
        redis_signals = RedisSignals.from_url(settings.redis_url)
        redis_activity = RedisActivity.from_url(settings.redis_url, defaults.USER_ACTIVE_WINDOW)
        closers += [redis_signals.close, redis_activity.close]
        signals, activity = redis_signals, redis_activity
    else:
        signals, activity = InProcessSignals(), InProcessActivity(defaults.USER_ACTIVE_WINDOW)
    tokens = oauth_tokens(settings, secrets, destinations, closers)
    imap = ImapMailProvider(
        blob_store=blobs,
        token_provider=tokens,
        settings=imap_settings(settings),
        budgets=budgets,
    )
    return MailPorts(
        cipher=keys,
        secrets=secrets,
        provider=DestinationCheckedProvider(imap, destinations),
        blobs=blobs,
        state=state,
        deferred=deferred,
        read_model=MailReader(db),
        signals=signals,
        destinations=destinations,
        activity=activity,
        content=StreamingContentReader(),
        budgets=budgets,
        flags=flag_state,
        folders=folders,
        outbox=OutboxReader(db),
        uploads=uploads,
        smtp_secrets=smtp_secrets,
        token_provider=tokens,
        providers=provider_table(settings),
    )


def oauth_tokens(
    settings: Settings,
    secrets: SqlSecretStore,
    destinations: ResolvingDestinationPolicy,
    closers: list[Callable[[], None]],
) -> OAuthTokens:
    """Access tokens of ``xoauth2`` accounts; the refresh lock is Redis's across the
    fleet, else in-process."""
    lock: LeaseBackend
    ttl = settings.oauth_token_timeout * 2 + 5
    if settings.redis_url:
        redis_lock = RedisLease.from_url(settings.redis_url, ttl, prefix=OAUTH_LOCK_PREFIX)
        closers.append(redis_lock.close)
        lock = redis_lock
    else:
        lock = InProcessLease(ttl)

    def client(name: str) -> OAuthClient:
        secret = getattr(settings, f"oauth_{name}_client_secret")
        return OAuthClient(
            getattr(settings, f"oauth_{name}_client_id"),
            secret.get_secret_value() if secret else None,
            settings.oauth_custom_token_url if name == "custom" else None,
        )

    return OAuthTokens(
        secrets,
        HttpTokenClient(
            destinations,
            timeout=settings.oauth_token_timeout,
            allow_http=settings.allow_private_hosts,
        ),
        lock,
        {name: client(name) for name in ("google", "microsoft", "custom")},
        margin=settings.oauth_refresh_margin,
        lock_wait=ttl,
    )


def bootstrap(settings: Settings | None = None, **overrides: Any) -> App:
    """Build the app from ``TIDINGS_*`` settings; keyword arguments override them.

    ``projections=[...]`` (the one keyword that is not a setting) are the host's own
    read models (docs/host-projections.md), run beside the built-in ones with those
    named by ``TIDINGS_HOST_PROJECTIONS``."""
    projections: Sequence[Projection] = overrides.pop("projections", ())
    if not isinstance(projections, list | tuple):
        raise TypeError("projections= takes a list of Projection objects")
    settings = settings or Settings(**overrides)
    url = DatabaseUrl.parse(settings.database_url)
    db = open_database(url)
    closers: list[Callable[[], None]] = []  # Redis clients the app holds, besides the pools
    with db.setup_lock():
        if isinstance(db, PostgresDatabase):
            db.ensure_schema()
        store, datastore = open_event_store(url)
        try:
            runner = build_projections(db, store, settings.projection_batch_size)
            mail = build_mail_ports(settings, db, closers)
            register_host_projections(
                runner, mail, [*projections, *load_projections(settings.host_projections)]
            )
            webhooks = SqlWebhookStore(db)
            webhooks.setup()
            key_usage = SqlKeyUsage(db)
            key_usage.setup()
        except BaseException:  # e.g. a refused master key: leave no pool behind
            for closer in closers:
                closer()
            db.close()
            datastore.close()
            raise
    ctx = Context(
        store=store,
        clock=SystemClock(),
        custom_fields=CustomFieldsReader(db),
        policy=Policy(
            field_definition_limit_per_tenant=settings.field_definition_limit_per_tenant,
            field_definition_write_roles=settings.field_definition_write_roles,
            value_write_roles=settings.value_write_roles,
            max_text_bytes=settings.max_text_bytes,
            max_attachment_result_bytes=int(settings.attachment_result_mb * 1024 * 1024),
            verify_timeout=settings.verify_timeout,
            api_keys_per_tenant=settings.api_keys_per_tenant,
            webhook_limit_per_tenant=settings.webhook_limit_per_tenant,
            mail_retention_default=settings.mail_retention_default(),
            max_send_bytes=int(settings.max_send_mb * 1024 * 1024),
            send_roles=settings.send_roles,
        ),
        mail_ports=mail,
        feed_model=FeedReader(db),
        webhook_store=webhooks,
        key_usage=key_usage,
    )

    def close() -> None:
        for closer in closers:
            closer()
        db.close()
        datastore.close()

    inline = settings.project_inline
    return App(
        ctx,
        runner,
        on_close=close,
        project_inline=url.dialect == "sqlite" if inline is None else inline,
    )


# --- operator handles (the CLI's projections and events commands) --------------------


def projection_runner(app: App) -> ProjectionRunner:
    """The runner behind ``app.projections``, for per-batch work (``projections run``)."""
    if not isinstance(app.projections, ProjectionRunner):
        raise TypeError("this App was not built by bootstrap()")
    return app.projections


def event_store(app: App) -> RecorderEventStore:
    """The app's event store with its raw log access (``events export`` / ``import``)."""
    if not isinstance(app.ctx.store, RecorderEventStore):
        raise TypeError("this App was not built by bootstrap()")
    return app.ctx.store


def retention_sweeper(
    app: App, settings: Settings, *, holder: str = "", lease: LeaseBackend | None = None
) -> RetentionSweeper:
    """The retention sweeper over the app's store and read models: one at a time under
    a Redis lease across the fleet, else an in-process one (``lease``: the tests')."""
    reader = app.ctx.custom_fields
    if not isinstance(reader, CustomFieldsReader):
        raise TypeError("this App was not built by bootstrap()")
    if lease is None:
        # Renewed after every batch: a ttl that outlives a slow batch several times.
        ttl = 300.0
        if settings.redis_url:
            lease = RedisLease.from_url(
                settings.redis_url, ttl, prefix=RETENTION_LOCK_PREFIX, holder=holder
            )
        else:
            lease = InProcessLease(ttl, holder=holder)
    blobs = app.ctx.mail.blobs
    if not isinstance(blobs, FilesystemBlobStore):
        raise TypeError("this App was not built by bootstrap()")
    mail = MailExpiryReader(reader.db)
    return RetentionSweeper(
        [
            ValueSweep(app.ctx, ValueExpiryReader(reader.db)),
            # Messages first: one due for both is expired once, not erased, then expired.
            MailSweep(app.ctx, mail, blobs, "messages"),
            MailSweep(app.ctx, mail, blobs, "bodies"),
        ],
        app.ctx.clock,
        lease,
        batch_size=settings.retention_batch_size,
    )
