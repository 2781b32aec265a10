"""All configuration: ``TIDINGS_*`` environment variables, read once at the entry point;
every setting is also a keyword argument of ``bootstrap()``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from application.users import KNOWN_ROLES, TENANT_ADMIN, TENANT_MEMBER

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
    # Apply projections right after each write (default: on for SQLite, off for PostgreSQL).
    project_inline: bool | None = None

    @field_validator("field_definition_write_roles", "value_write_roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        roles = frozenset(value)
        unknown = roles - KNOWN_ROLES
        if unknown:
            raise ValueError(f"unknown roles {sorted(unknown)}; known: {sorted(KNOWN_ROLES)}")
        if not roles:
            raise ValueError("at least one role is needed")
        return roles
