"""All configuration: ``TIDINGS_*`` environment variables, read once at the entry point;
every setting is also a keyword argument of ``bootstrap()``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from application.users import TENANT_ADMIN, TENANT_MEMBER

Roles = Annotated[frozenset[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIDINGS_", extra="forbid", frozen=True)

    database_url: str = "sqlite:///./tidings.db"
    redis_url: str | None = None
    blob_dir: Path = Path("./tidings-blobs")
    master_key: SecretStr | None = None
    field_definition_limit_per_tenant: Annotated[int, Field(ge=0)] | None = None
    field_definition_write_roles: Roles = frozenset({TENANT_ADMIN})
    value_write_roles: Roles = frozenset({TENANT_ADMIN, TENANT_MEMBER})
    projection_batch_size: Annotated[int, Field(ge=1, le=100_000)] = 1000
    # The longest text custom-field value, in UTF-8 bytes (docs/fault-isolation.md).
    max_text_bytes: Annotated[int, Field(ge=1, le=1024 * 1024)] = 64 * 1024
    # Apply projections right after each write (default: on for SQLite, off for PostgreSQL).
    project_inline: bool | None = None

    # Workers (SPEC §7); durations in seconds.
    poll_interval: Annotated[float, Field(gt=0)] = 300.0
    poll_concurrency: Annotated[int, Field(ge=1, le=256)] = 8
    poll_deadline: Annotated[float, Field(gt=0)] = 120.0
    backfill_window_days: Annotated[int, Field(ge=0)] = 30
    max_messages_per_poll: Annotated[int, Field(ge=1, le=10_000)] = 200
    parse_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    stream_parse_mb: Annotated[float, Field(gt=0)] = 4.0
    max_message_mb: Annotated[float, Field(gt=0)] = 100.0
    imap_read_timeout: Annotated[float, Field(gt=0)] = 120.0
    watch_lease_ttl: Annotated[float, Field(ge=3)] = 90.0
    # An IDLE connection silent this long is taken for dead and restarted (SPEC §7.3).
    watch_dead_after: Annotated[float, Field(gt=0)] = 300.0
    poll_warm: Annotated[float, Field(gt=0)] = 300.0
    poll_cold: Annotated[float, Field(gt=0)] = 1800.0
    max_accounts_per_worker: Annotated[int, Field(ge=1)] = 5000
    hot_budget_per_worker: Annotated[int, Field(ge=0)] = 2000
    per_host_conn_cap: Annotated[int, Field(ge=1)] = 2000

    @field_validator("field_definition_write_roles", "value_write_roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        # Any role name is allowed: a configured set replaces the default (SPEC §3), e.g.
        # a custom ``FieldManager`` role for definitions shuts ``TenantAdmin`` out.
        roles = frozenset(value)
        if not all(isinstance(role, str) and role.strip() == role and role for role in roles):
            raise ValueError("role names must be non-empty strings without surrounding spaces")
        if not roles:
            raise ValueError("at least one role is needed")
        return roles
