"""API keys: how a program outside the process acts as a user of one tenant.

State machine of a key: (none) --create--> active --revoke--> revoked (final).

A tenant's ``ApiKeyCatalog`` (one stream per tenant) lists its active keys with who
minted each: a key is created and listed in one append, and revoked and unlisted in
one, so the catalog's count is exact (the per-tenant cap holds under racing writers:
the second append of a catalog version conflicts) and revoking a key can reach every
key it minted.

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
from domain.identity import stream_id


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


@dataclass(frozen=True, kw_only=True)
class ApiKeyListed(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.api.ApiKeyListed"

    key_id: str
    created_by: str


@dataclass(frozen=True, kw_only=True)
class ApiKeyUnlisted(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.api.ApiKeyUnlisted"

    key_id: str


@dataclass(frozen=True, kw_only=True)
class ApiKeyCatalogsFilled(DomainEvent):
    """The keys created before tenants had catalogs are listed in them (once per store)."""

    TOPIC: ClassVar[str] = "tidings.api.ApiKeyCatalogsFilled"

    keys_listed: int


EVENTS: tuple[type[DomainEvent], ...] = (
    ApiKeyCreated,
    ApiKeyRevoked,
    ApiKeyListed,
    ApiKeyUnlisted,
    ApiKeyCatalogsFilled,
)


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


class ApiKeyCatalog(Aggregate):
    """A tenant's active keys: key id -> who minted it (``api-key:<id>`` for a key)."""

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.active: dict[str, str] = {}

    @staticmethod
    def id_for(tenant_id: str) -> UUID:
        return stream_id("api-key-catalog", tenant_id)

    def add(self, key_id: str, *, created_by: str, now: datetime) -> None:
        if key_id not in self.active:
            self._trigger(ApiKeyListed, now, key_id=key_id, created_by=created_by)

    def unlist(self, key_id: str, *, now: datetime) -> None:
        if key_id in self.active:
            self._trigger(ApiKeyUnlisted, now, key_id=key_id)

    def minted_by(self, key_id: str) -> list[str]:
        """Every active key minted by ``key_id``, and by those, and so on."""
        found: list[str] = []
        creators = {f"api-key:{key_id}"}
        while creators:
            children = [k for k, by in self.active.items() if by in creators and k not in found]
            found += children
            creators = {f"api-key:{k}" for k in children}
        return found

    def mutate(self, event: DomainEvent) -> None:
        match event:
            case ApiKeyListed():
                self.active[event.key_id] = event.created_by
            case ApiKeyUnlisted():
                self.active.pop(event.key_id, None)


class CatalogFill(Aggregate):
    """Whether this store's keys from before the catalogs are in them: one stream, one
    event, written once by whichever process fills them first."""

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.done = False

    @staticmethod
    def id_for() -> UUID:
        return stream_id("api-key-catalog-fill", "v1")

    def finish(self, *, keys_listed: int, now: datetime) -> None:
        if not self.done:
            self._trigger(ApiKeyCatalogsFilled, now, keys_listed=keys_listed)

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, ApiKeyCatalogsFilled):
            self.done = True
