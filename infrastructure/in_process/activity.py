"""In-process user activity: the single-process stand-in for the Redis keys (the app
and its worker share one process, so they share this object). Entries older than the
window are dropped as new ones come (amortised), and never answered."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping

from application.mail.activity import ActiveTimes, UserKey


class InProcessActivity:
    def __init__(self, window: float) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self._window = window
        self._users: dict[UserKey, float] = {}
        self._tenants: dict[str, float] = {}
        self._lock = threading.Lock()
        self._prune_at = 1024

    @property
    def window(self) -> float:
        return self._window

    def record(self, tenant_id: str, user_id: str, at: float) -> None:
        with self._lock:
            key = (tenant_id, user_id)
            self._users[key] = max(self._users.get(key, at), at)
            self._tenants[tenant_id] = max(self._tenants.get(tenant_id, at), at)
            if len(self._users) >= self._prune_at:
                self._prune(at)
                self._prune_at = max(1024, 2 * len(self._users))

    def restore(
        self, users: Mapping[UserKey, float], tenants: Mapping[str, float], now: float
    ) -> None:
        with self._lock:
            for key, at in users.items():
                self._users[key] = max(self._users.get(key, at), at)
            for tenant, at in tenants.items():
                self._tenants[tenant] = max(self._tenants.get(tenant, at), at)

    def last_active(
        self, users: Collection[UserKey], tenants: Collection[str], now: float
    ) -> ActiveTimes:
        with self._lock:
            found_users = {k: t for k in users if (t := self._users.get(k)) is not None}
            found_tenants = {k: t for k in tenants if (t := self._tenants.get(k)) is not None}
        return ActiveTimes(
            users={k: t for k, t in found_users.items() if now - t < self._window},
            tenants={k: t for k, t in found_tenants.items() if now - t < self._window},
        )

    def _prune(self, now: float) -> None:
        self._users = {k: t for k, t in self._users.items() if now - t < self._window}
        self._tenants = {k: t for k, t in self._tenants.items() if now - t < self._window}
