"""All configuration: ``TIDINGS_*`` environment variables, read once at the entry point;
every setting is also a keyword argument of ``bootstrap()``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from application import worker_defaults as worker
from application.users import TENANT_ADMIN, TENANT_MEMBER
from domain.mail_retention import MailRetention
from domain.retention import InvalidRetention

log = logging.getLogger("tidings.settings")

Roles = Annotated[frozenset[str], NoDecode]


class ProviderLimitSetting(BaseModel):
    """An operator's entry of the provider table (``provider_limits``, keyed by host or
    ``*.domain``); it takes precedence over the built-in entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=64)] = "custom"
    conn_cap: Annotated[int, Field(ge=1)] | None = None
    daily_budget_mb: Annotated[float, Field(gt=0)] | None = None
    daily_send_limit: Annotated[int, Field(ge=1)] | None = None
    send_connections: Annotated[int, Field(ge=1, le=64)] | None = None
    saves_sent: bool = False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIDINGS_", extra="forbid", frozen=True)

    database_url: str = "sqlite:///./tidings.db"
    redis_url: str | None = None
    blob_dir: Path = Path("./tidings-blobs")
    master_key: SecretStr | None = None
    field_definition_limit_per_tenant: Annotated[int, Field(ge=0)] | None = None
    field_definition_write_roles: Roles = frozenset({TENANT_ADMIN})
    value_write_roles: Roles = frozenset({TENANT_ADMIN, TENANT_MEMBER})
    projection_batch_size: Annotated[int, Field(ge=1, le=100_000)] = 5000
    # The longest text custom-field value, in UTF-8 bytes (docs/fault-isolation.md).
    max_text_bytes: Annotated[int, Field(ge=1, le=1024 * 1024)] = 64 * 1024
    # Apply projections right after each write (default: on for SQLite, off for PostgreSQL).
    project_inline: bool | None = None
    # Let IMAP hosts resolve to loopback or private addresses (the demo, tests).
    allow_private_hosts: bool = False

    # Workers; durations in seconds; defaults in ``application.worker_defaults``.
    # ``poll_interval``: warm accounts, and hot ones' secondary poll under IDLE.
    poll_interval: Annotated[float, Field(gt=0)] = worker.POLL_INTERVAL
    poll_concurrency: Annotated[int, Field(ge=1, le=256)] = worker.POLL_CONCURRENCY
    poll_deadline: Annotated[float, Field(gt=0)] = worker.POLL_DEADLINE
    watch_login_pool: Annotated[int, Field(ge=1, le=256)] = worker.WATCH_LOGIN_POOL
    backfill_window_days: Annotated[int, Field(ge=0)] = worker.BACKFILL_WINDOW_DAYS
    # Seconds between two LISTs of an account's folders (the poll's folder pass).
    folder_list_interval: Annotated[float, Field(ge=0)] = worker.FOLDER_LIST_INTERVAL
    # Push the other synced folders on the watch's connection (NOTIFY, where offered);
    # off, they wait for the poll. Off by default: on Dovecot a NOTIFY naming other
    # folders also wakes the session at every change to INBOX (it watches INBOX's index
    # log and re-reads its folder list index 0.5 s later), so each pushed message costs
    # the server more (docs/decisions/watch-group-commit-layers.md).
    folder_notify: bool = worker.FOLDER_NOTIFY
    max_messages_per_poll: Annotated[int, Field(ge=1, le=10_000)] = worker.MAX_MESSAGES_PER_POLL
    parse_concurrency: Annotated[int, Field(ge=1, le=64)] = worker.PARSE_CONCURRENCY
    stream_parse_mb: Annotated[float, Field(gt=0)] = 4.0
    max_message_mb: Annotated[float, Field(gt=0)] = 100.0
    attachment_result_mb: Annotated[float, Field(gt=0)] = 25.0  # get-attachment's answer
    # Sending (docs/workers.md#sending): the largest message, who may send from shared
    # accounts, the worker's turn, one attempt's deadline, the backoff and its budget.
    max_send_mb: Annotated[float, Field(gt=0)] = 25.0
    send_roles: Roles = frozenset({TENANT_ADMIN, TENANT_MEMBER})
    send_interval: Annotated[float, Field(gt=0)] = 1.0
    send_attempt_timeout: Annotated[float, Field(gt=0)] = 60.0
    send_retry_first: Annotated[float, Field(gt=0)] = 30.0
    send_retry_longest: Annotated[float, Field(gt=0)] = 3600.0
    send_retry_budget: Annotated[float, Field(gt=0)] = 172800.0
    send_concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    # SMTP connections a worker keeps logged in for an account's next message (at least
    # send_concurrency x send_connections_per_account, else busy lanes evict each
    # other's between two messages), and how long one waits unused before it is closed.
    send_kept_connections: Annotated[int, Field(ge=0, le=1024)] = 16
    send_idle_seconds: Annotated[float, Field(ge=0)] = 5.0
    # SMTP sessions a worker runs at once for one account (the lanes of its series),
    # unless its provider entry says ``send_connections``; per-host slots still bound all.
    send_connections_per_account: Annotated[int, Field(ge=1, le=64)] = 3
    smtp_ca_file: Path | None = None  # trust this CA (PEM) for SMTP servers (tests, private CAs)
    imap_read_timeout: Annotated[float, Field(gt=0)] = 120.0
    watch_lease_ttl: Annotated[float, Field(ge=3)] = worker.WATCH_LEASE_TTL
    # An IDLE connection silent this long is probed (DONE + IDLE); a probe unanswered
    # for ``watch_probe_timeout`` counts as dead and the watch restarts.
    watch_probe_after: Annotated[float, Field(gt=0)] = worker.WATCH_PROBE_AFTER
    watch_probe_timeout: Annotated[float, Field(gt=0)] = worker.WATCH_PROBE_TIMEOUT
    # Deprecated (silence alone no longer means death): read, warned about, and moved
    # to ``watch_probe_after`` by ``_watch_dead_after_alias``; always None after it.
    watch_dead_after: Annotated[float, Field(gt=0)] | None = None
    # Deprecated alias of ``poll_interval`` (one cadence, two names): read, warned about,
    # and moved there by ``_poll_warm_alias``; always None after validation.
    poll_warm: Annotated[float, Field(gt=0)] | None = None
    poll_cold: Annotated[float, Field(gt=0)] = worker.POLL_COLD
    max_accounts_per_worker: Annotated[int, Field(ge=1)] = worker.MAX_ACCOUNTS_PER_WORKER
    hot_budget_per_worker: Annotated[int, Field(ge=0)] = worker.HOT_BUDGET_PER_WORKER
    per_host_conn_cap: Annotated[int, Field(ge=1)] = worker.PER_HOST_CONN_CAP
    # Provider table entries added to the built-in ones (JSON in the environment), e.g.
    # {"imap.example.com": {"conn_cap": 8, "daily_budget_mb": 1000}}; docs/workers.md.
    provider_limits: dict[
        Annotated[str, Field(min_length=1, max_length=253)], ProviderLimitSetting
    ] = {}

    @model_validator(mode="before")
    @classmethod
    def _poll_warm_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("poll_warm") is None:
            return data
        data = dict(data)
        warm = data.pop("poll_warm")
        if data.get("poll_interval") is None:
            data["poll_interval"] = warm
            log.warning("settings.deprecated name=poll_warm use=poll_interval")
        else:
            log.warning("settings.deprecated name=poll_warm use=poll_interval ignored=poll_warm")
        return data

    # OAuth2 clients per provider (``xoauth2`` accounts); an account's own clientId wins.
    oauth_google_client_id: str | None = None
    oauth_google_client_secret: SecretStr | None = None
    oauth_microsoft_client_id: str | None = None
    oauth_microsoft_client_secret: SecretStr | None = None
    oauth_custom_client_id: str | None = None
    oauth_custom_client_secret: SecretStr | None = None
    # The only token URL the custom client's secret is ever sent to (unset: none).
    oauth_custom_token_url: Annotated[str, Field(max_length=2048)] | None = None
    # Refresh an access token this many seconds before it expires; the token request's
    # total deadline.
    oauth_refresh_margin: Annotated[float, Field(ge=0)] = 120.0
    oauth_token_timeout: Annotated[float, Field(gt=0, le=120)] = 15.0

    @model_validator(mode="before")
    @classmethod
    def _watch_dead_after_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("watch_dead_after") is None:
            return data
        data = dict(data)
        dead = data.pop("watch_dead_after")
        if data.get("watch_probe_after") is None:
            data["watch_probe_after"] = dead
            log.warning("settings.deprecated name=watch_dead_after use=watch_probe_after")
        else:
            log.warning(
                "settings.deprecated name=watch_dead_after use=watch_probe_after"
                " ignored=watch_dead_after"
            )
        return data

    # The HTTP API: requests per second per API key, and the burst a key may spend at once.
    api_rate_per_second: Annotated[float, Field(gt=0)] = 20.0
    api_rate_burst: Annotated[int, Field(ge=1)] = 40
    # Budgets spent before a key is looked up: per client address, and for all callers.
    api_address_rate_per_second: Annotated[float, Field(gt=0)] = 50.0
    api_address_rate_burst: Annotated[int, Field(ge=1)] = 100
    api_global_rate_per_second: Annotated[float, Field(gt=0)] = 1000.0
    api_global_rate_burst: Annotated[int, Field(ge=1)] = 2000
    # Requests that dial out (a verify, a token refresh): in all, and per tenant.
    api_dial_out_threads: Annotated[int, Field(ge=1, le=256)] = 16
    api_dial_out_per_tenant: Annotated[int, Field(ge=1, le=256)] = 4
    # Open event streams (and long polls) per API key.
    api_streams_per_key: Annotated[int, Field(ge=1, le=1000)] = 8
    # Uploads (``POST /v1/uploads``): seconds for a whole upload to arrive, uploads a
    # tenant streams at once, and the threads that store them (all tenants).
    api_upload_timeout: Annotated[float, Field(gt=0)] = 120.0
    api_uploads_per_tenant: Annotated[int, Field(ge=1, le=256)] = 2
    api_upload_threads: Annotated[int, Field(ge=1, le=256)] = 8
    # uvicorn: open connections in all, and seconds a connection may idle or take to
    # send its request's headers and body.
    api_max_connections: Annotated[int, Field(ge=1)] = 1000
    api_request_timeout: Annotated[float, Field(gt=0, le=300)] = 15.0
    api_keys_per_tenant: Annotated[int, Field(ge=1, le=10_000)] = 100
    # The whole of connect-mail-account's verify (connect, greeting, TLS, login).
    verify_timeout: Annotated[float, Field(gt=0, le=300)] = 20.0

    # The host's own projections, "module:attribute" comma-separated (docs/host-projections.md).
    host_projections: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("host_projections", mode="before")
    @classmethod
    def _host_projections(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    # Webhooks: the attempt deadline, the retry backoff (first wait, longest wait, total
    # budget after the first attempt), the delivery loop's thread pools, the attempts in
    # flight per tenant's host and per tenant (in each pool), and the webhooks a tenant
    # may have (docs/webhooks.md).
    webhook_timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    webhook_retry_first: Annotated[float, Field(gt=0)] = 5.0
    webhook_retry_longest: Annotated[float, Field(gt=0)] = 3600.0
    webhook_retry_budget: Annotated[float, Field(ge=0)] = 24 * 3600.0
    webhook_pool: Annotated[int, Field(ge=1, le=512)] = 32
    webhook_slow_pool: Annotated[int, Field(ge=1, le=512)] = 8
    webhook_per_host: Annotated[int, Field(ge=1, le=64)] = 2
    webhook_per_tenant: Annotated[int, Field(ge=1, le=512)] = 8
    webhook_limit_per_tenant: Annotated[int, Field(ge=0, le=10_000)] = 20
    # Retention: how often a worker runs the sweeper (one at a time across the fleet),
    # and how many expired items one batch takes (one statement, one append).
    retention_interval: Annotated[float, Field(ge=1, le=86_400)] = 3600.0
    retention_batch_size: Annotated[int, Field(ge=1, le=100_000)] = 1000
    # The operator's mail retention for tenants without their own (``keepFor`` each,
    # 30d..10y; unset: kept for ever), checked by ``_mail_retention``.
    mail_retention_bodies_for: str | None = None
    mail_retention_messages_for: str | None = None
    webhook_interval: Annotated[float, Field(gt=0, le=60)] = 0.2
    # A claimed delivery's lease, renewed every ttl/3 while its attempt runs: how soon a
    # dead delivery process's claims are taken by another.
    webhook_lease_ttl: Annotated[float, Field(ge=3, le=600)] = 8.0
    # Deprecated alias of ``webhook_per_host`` (the cap counted per webhook; it counts
    # per tenant's host now): read, warned about, and moved there by
    # ``_webhook_per_endpoint_alias``; always None after validation.
    webhook_per_endpoint: Annotated[int, Field(ge=1, le=64)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _webhook_per_endpoint_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("webhook_per_endpoint") is None:
            return data
        data = dict(data)
        per_endpoint = data.pop("webhook_per_endpoint")
        if data.get("webhook_per_host") is None:
            data["webhook_per_host"] = per_endpoint
            log.warning("settings.deprecated name=webhook_per_endpoint use=webhook_per_host")
        else:
            log.warning(
                "settings.deprecated name=webhook_per_endpoint use=webhook_per_host"
                " ignored=webhook_per_endpoint"
            )
        return data

    @model_validator(mode="after")
    def _mail_retention(self) -> Settings:
        try:
            self.mail_retention_default()
        except InvalidRetention as invalid:
            raise ValueError(f"mail retention: {invalid}") from None
        return self

    def mail_retention_default(self) -> MailRetention:
        return MailRetention(
            bodies_for=self.mail_retention_bodies_for,
            messages_for=self.mail_retention_messages_for,
        )

    @field_validator(
        "field_definition_write_roles", "value_write_roles", "send_roles", mode="before"
    )
    @classmethod
    def _roles(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        # Any role name is allowed: a configured set replaces the default, e.g.
        # a custom ``FieldManager`` role for definitions shuts ``TenantAdmin`` out.
        roles = frozenset(value)
        if not all(isinstance(role, str) and role.strip() == role and role for role in roles):
            raise ValueError("role names must be non-empty strings without surrounding spaces")
        if not roles:
            raise ValueError("at least one role is needed")
        return roles
