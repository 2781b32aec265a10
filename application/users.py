"""Who is calling: a user acts inside its own tenant with a set of roles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SYSTEM_TENANT_ID = "system"

SYSTEM_ADMIN = "SystemAdmin"
TENANT_ADMIN = "TenantAdmin"
TENANT_MEMBER = "TenantMember"
KNOWN_ROLES = frozenset({SYSTEM_ADMIN, TENANT_ADMIN, TENANT_MEMBER})


@dataclass(frozen=True)
class User:
    id: str
    tenant_id: str
    roles: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        # Accept any iterable of role names from callers, keep a frozenset.
        object.__setattr__(self, "roles", frozenset(self.roles))

    def has_any(self, roles: Iterable[str]) -> bool:
        return not self.roles.isdisjoint(roles)

    @property
    def in_system_tenant(self) -> bool:
        return self.tenant_id == SYSTEM_TENANT_ID
