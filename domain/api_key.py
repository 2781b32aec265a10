"""API keys: how a program outside the process acts as a user of one tenant.

State machine: (none) --create--> active --revoke--> revoked (final).

The key itself never reaches this module: events hold the SHA-256 digest of its secret
part only. The roles are fixed at creation; a key acts with exactly those roles inside
its own tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar
from uuid import UUID

from domain.errors import DomainError
from domain.events import Aggregate, DomainEvent


class ApiKeyError(DomainError):
    pass


class ApiKeyExists(ApiKeyError):
    pass


class ApiKeyMissing(ApiKeyError):
    pass


@dataclass(frozen=True, kw_only=True)
class ApiKeyCreated(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.api.ApiKeyCreated"

    tenant_id: str
    name: str
    roles: list[str]
    secret_digest: str  # hex SHA-256 of the key's secret part
    created_by: str


@dataclass(frozen=True, kw_only=True)
class ApiKeyRevoked(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.api.ApiKeyRevoked"

    tenant_id: str
    revoked_by: str


EVENTS: tuple[type[DomainEvent], ...] = (ApiKeyCreated, ApiKeyRevoked)


class ApiKey(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.tenant_id = ""
        self.name = ""
        self.roles: frozenset[str] = frozenset()
        self.secret_digest = ""
        self.created_at: datetime | None = None
        self.revoked = False

    @property
    def exists(self) -> bool:
        return self.version > 0

    @property
    def active(self) -> bool:
        return self.exists and not self.revoked

    def create(
        self,
        *,
        tenant_id: str,
        name: str,
        roles: frozenset[str],
        secret_digest: str,
        created_by: str,
        now: datetime,
    ) -> None:
        if self.exists:
            raise ApiKeyExists(str(self.id))
        self._trigger(
            ApiKeyCreated,
            now,
            tenant_id=tenant_id,
            name=name,
            roles=sorted(roles),
            secret_digest=secret_digest,
            created_by=created_by,
        )

    def revoke(self, *, by: str, now: datetime) -> bool:
        """Revoke the key; False when it already was (revoking twice is not an error)."""
        if not self.exists:
            raise ApiKeyMissing(str(self.id))
        if self.revoked:
            return False
        self._trigger(ApiKeyRevoked, now, tenant_id=self.tenant_id, revoked_by=by)
        return True

    def mutate(self, event: DomainEvent) -> None:
        match event:
            case ApiKeyCreated():
                self.tenant_id = event.tenant_id
                self.name = event.name
                self.roles = frozenset(event.roles)
                self.secret_digest = event.secret_digest
                self.created_at = event.timestamp
            case ApiKeyRevoked():
                self.revoked = True
