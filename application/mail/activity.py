"""User activity shared by the fleet: the port ``user-active`` records to and the
workers' tier classification reads from.

A ``user-active`` call records (tenant, user) at a time; every worker then asks, for the
accounts of a fleet tick at once, when their users were last active: a user-scoped
account by its owner, a shared account by any user of its tenant. An entry lives for the
user-active window (older ones are gone, which is what "not active" means), so after a
whole fleet restarts the accounts that were hot are hot again without new activity.

Recording is best effort, like the signal beside it: a backend outage is logged, never
the caller's error. Reading raises ``ActivityUnavailable``; the caller keeps what it
knew. A backend that comes back without its data (a restart without persistence, a
failover to a replica behind) is given back what the workers still know (``restore``),
so a fleet restarted after it still finds the active users.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from application.errors import ApplicationError

UserKey = tuple[str, str]  # (tenant_id, user_id)


class ActivityUnavailable(ApplicationError):
    """The activity backend could not be read."""


@dataclass(frozen=True)
class ActiveTimes:
    """Last activity (unix seconds) of the users and tenants asked about; absent: none
    within the window."""

    users: dict[UserKey, float] = field(default_factory=dict)
    tenants: dict[str, float] = field(default_factory=dict)

    def of_account(self, tenant_id: str, owner_user_id: str | None, shared: bool) -> float | None:
        """The activity that promotes such an account (None: none)."""
        if shared:
            return self.tenants.get(tenant_id)
        if owner_user_id is None:
            return None
        return self.users.get((tenant_id, owner_user_id))


class UserActivity(Protocol):
    @property
    def window(self) -> float:
        """Seconds an activity is remembered."""
        ...

    def record(self, tenant_id: str, user_id: str, at: float) -> None:
        """The user (and so its tenant) was active at ``at`` (best effort)."""
        ...

    def last_active(
        self, users: Collection[UserKey], tenants: Collection[str], now: float
    ) -> ActiveTimes:
        """Who of these was active within the window before ``now``; one round trip per
        chunk of keys, never one per user. Raises ``ActivityUnavailable``."""
        ...

    def restore(
        self, users: Mapping[UserKey, float], tenants: Mapping[str, float], now: float
    ) -> None:
        """Records these times again where the backend holds none or an older one, each
        for what is left of its window before ``now`` (best effort, like ``record``)."""
        ...
