"""Who is calling: a user acts inside its own tenant with a set of roles.

Roles are bound to tenants: ``SystemAdmin`` counts only in ``SYSTEM_TENANT_ID``. A user
of any other tenant that claims it simply does not hold it, so no handler can grant
its power by forgetting a check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SYSTEM_TENANT_ID = "system"

SYSTEM_ADMIN = "SystemAdmin"
TENANT_ADMIN = "TenantAdmin"
TENANT_MEMBER = "TenantMember"
KNOWN_ROLES = frozenset({SYSTEM_ADMIN, TENANT_ADMIN, TENANT_MEMBER})
SYSTEM_ONLY_ROLES = frozenset({SYSTEM_ADMIN})  # held only by users of SYSTEM_TENANT_ID


@dataclass(frozen=True)
class User:
    id: str
    tenant_id: str
    roles: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        # Accept any iterable of role names from callers, keep a frozenset; this is the
        # one place roles are resolved, so the tenant binding is enforced here.
        roles = frozenset(self.roles)
        if self.tenant_id != SYSTEM_TENANT_ID:
            roles -= SYSTEM_ONLY_ROLES
        object.__setattr__(self, "roles", roles)

    def has_any(self, roles: Iterable[str]) -> bool:
        return not self.roles.isdisjoint(roles)

    @property
    def in_system_tenant(self) -> bool:
        return self.tenant_id == SYSTEM_TENANT_ID
