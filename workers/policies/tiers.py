"""Hot, warm and cold accounts.

Per account the policy remembers three times: ``seen`` (first tracked), ``user_active``
(the last ``user-active`` of a user of the account, or a connect / sync-now) and ``mail``
(the last time new mail was seen). ``classify(now, hot_budget)`` then decides:

    hot   user_active within user_active_window (30 min) or mail within recent_mail_window
          (1 h) — the ``hot_budget`` most recently active of these; the rest are warm.
          The fleet's budget is ``hot_budget(workers)``: hot_budget_per_worker for each
          live worker (at least one), the same for the claims and the poll schedule
    warm  any of the three within warm_window (24 h)
    cold  otherwise

    hot  -> IDLE + a secondary poll every poll_warm
    warm -> poll every poll_warm      cold -> poll every poll_cold

Invariants: classification is a pure function of the remembered times, ``now`` and the
budget (deterministic; ties by account id); at most ``hot_budget`` accounts are hot and
the ones shed are the least recently active; times after ``now`` count as ``now``; a
newly tracked account is warm, not cold, for a warm window (a restarted worker knows no
history of its own: ``learn`` seeds it from the fleet's shared state, ``workers.shared_tiers``).
Times are unix seconds (wall time: the shared state's times come from other processes).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from application import worker_defaults as defaults

Tier = Literal["hot", "warm", "cold"]
NEVER = float("-inf")


@dataclass(frozen=True)
class TierSettings:
    user_active_window: float = defaults.USER_ACTIVE_WINDOW
    recent_mail_window: float = defaults.RECENT_MAIL_WINDOW
    warm_window: float = defaults.WARM_WINDOW
    poll_warm: float = defaults.POLL_INTERVAL
    poll_cold: float = defaults.POLL_COLD
    hot_budget_per_worker: int = defaults.HOT_BUDGET_PER_WORKER


@dataclass
class _Activity:
    seen: float
    user_active: float = NEVER
    mail: float = NEVER


class TierPolicy:
    def __init__(self, settings: TierSettings | None = None) -> None:
        self.settings = settings or TierSettings()
        self._accounts: dict[str, _Activity] = {}

    def track(self, account_id: str, now: float) -> None:
        self._accounts.setdefault(account_id, _Activity(seen=now))

    def untrack(self, account_id: str) -> None:
        self._accounts.pop(account_id, None)

    def tracked(self) -> frozenset[str]:
        return frozenset(self._accounts)

    def on_user_active(self, account_ids: Iterable[str], now: float) -> None:
        for account_id in account_ids:
            self.track(account_id, now)
            activity = self._accounts[account_id]
            activity.user_active = max(activity.user_active, now)

    def on_mail(self, account_id: str, at: float, now: float) -> None:
        """New mail seen ``at`` (e.g. the newest message's time); a time after ``now`` (a
        bad Date header) counts as ``now``, so it cannot keep the account hot for days."""
        self.track(account_id, now)
        activity = self._accounts[account_id]
        activity.mail = max(activity.mail, min(at, now))

    def learn(
        self, user_active: Mapping[str, float], mail: Mapping[str, float], now: float
    ) -> bool:
        """Times read from the fleet's shared state, for tracked accounts only (others are
        not this worker's to know). Times only rise; True when one did, i.e. when the
        classification may have changed."""
        rose = False
        for times, attribute in ((user_active, "user_active"), (mail, "mail")):
            for account_id, at in times.items():
                activity = self._accounts.get(account_id)
                seen = min(at, now)
                if activity is not None and seen > getattr(activity, attribute):
                    setattr(activity, attribute, seen)
                    rose = True
        return rose

    def hot_budget(self, workers: int) -> int:
        """How many accounts the fleet keeps hot: the per-worker budget for each live
        worker, counting this one when none is known."""
        return self.settings.hot_budget_per_worker * max(workers, 1)

    def classify(self, now: float, hot_budget: int) -> dict[str, Tier]:
        # Runs every fleet tick over every account (10,000 in a worker of a big fleet):
        # kept to plain comparisons, and the budget's sort only when it must choose.
        active_since = now - self.settings.user_active_window
        mail_since = now - self.settings.recent_mail_window
        warm_since = now - self.settings.warm_window
        tiers: dict[str, Tier] = {}
        candidates: list[tuple[float, str]] = []
        for account_id, a in self._accounts.items():
            user_active = a.user_active if a.user_active < now else now
            mail = a.mail if a.mail < now else now
            latest = user_active if user_active > mail else mail
            if user_active > active_since or mail > mail_since:
                candidates.append((latest, account_id))
                tiers[account_id] = "hot"  # unless the budget sheds it
            elif latest > warm_since or (a.seen if a.seen < now else now) > warm_since:
                tiers[account_id] = "warm"
            else:
                tiers[account_id] = "cold"
        budget = max(hot_budget, 0)
        if len(candidates) > budget:
            # Most recent first; equal times: the smaller account id first.
            kept = heapq.nsmallest(budget, candidates, key=lambda c: (-c[0], c[1]))
            for _, account_id in set(candidates).difference(kept):
                tiers[account_id] = "warm"
        return tiers

    def poll_interval(self, tier: Tier) -> float:
        return self.settings.poll_cold if tier == "cold" else self.settings.poll_warm

    def next_poll_at(self, tier: Tier, last_poll_at: float) -> float:
        return last_poll_at + self.poll_interval(tier)


class RecentUsers:
    """Who was active lately (``user-active``), so accounts this worker learns of only
    later — its directory was still empty (just started) or lagging (a fresh connect) —
    are promoted too: a user's own accounts and, for any of the tenant's users, the
    tenant's shared ones. Entries older than ``window`` are dropped by ``prune``."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._users: dict[tuple[str, str], float] = {}
        self._tenants: dict[str, float] = {}

    def seen(self, tenant_id: str, user_id: str, now: float) -> None:
        key = (tenant_id, user_id)
        self._users[key] = max(self._users.get(key, NEVER), now)
        self._tenants[tenant_id] = max(self._tenants.get(tenant_id, NEVER), now)

    def last_active(self, tenant_id: str, owner_user_id: str | None, shared: bool) -> float:
        """The last activity that promotes such an account (``NEVER`` if none)."""
        if shared:
            return self._tenants.get(tenant_id, NEVER)
        if owner_user_id is None:
            return NEVER
        return self._users.get((tenant_id, owner_user_id), NEVER)

    def prune(self, now: float) -> None:
        self._users = {k: t for k, t in self._users.items() if now - t < self.window}
        self._tenants = {k: t for k, t in self._tenants.items() if now - t < self.window}
