"""The tier state every worker of the fleet shares: when each account's users were last
active (``user-active``, from the ``UserActivity`` store) and when its newest mail
arrived (the mail read model). Nothing of it lives only in a worker's memory, so a
worker started after a whole fleet restarted classifies the accounts as the old fleet
did, within one fleet tick.

``read`` runs on the directory reader's thread, right after a directory refresh, for all
the refreshed accounts at once: one read-model statement and one pipelined Redis round
trip, never one per account. Either source failing leaves its part empty (the
supervisor keeps what it knew) and is logged.

It remembers the user activity it last read, within the window. When the store answers
without some of it (Redis restarted empty, or failed over to a replica behind), the
remembered times still count and are written back (``UserActivity.restore``): nothing a
tier depends on is lost while any worker still knows it, so a fleet restarted after such
an outage finds its active users again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from application import worker_defaults as defaults
from application.mail.activity import ActiveTimes, ActivityUnavailable, UserActivity, UserKey
from application.mail.read_model import MailReadModel
from workers.account_info import AccountInfo, SharedActivity

log = logging.getLogger("tidings.tiers")


class SharedTierState:
    def __init__(
        self,
        activity: UserActivity,
        read_model: MailReadModel,
        *,
        recent_mail_window: float = defaults.RECENT_MAIL_WINDOW,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._activity = activity
        self._read_model = read_model
        self._recent_mail_window = recent_mail_window
        self._clock = clock
        self._known = ActiveTimes()

    def read(self, accounts: Mapping[str, AccountInfo]) -> SharedActivity:
        now = self._clock()
        return SharedActivity(self._user_active(accounts, now), self._mail(accounts, now))

    def _user_active(self, accounts: Mapping[str, AccountInfo], now: float) -> dict[str, float]:
        users: set[UserKey] = set()
        tenants: set[str] = set()
        for info in accounts.values():
            if info.scope == "shared":
                tenants.add(info.tenant_id)
            elif info.owner_user_id is not None:
                users.add((info.tenant_id, info.owner_user_id))
        if not users and not tenants:
            return {}
        try:
            times = self._activity.last_active(users, tenants, now)
        except ActivityUnavailable:
            log.warning("tiers.activity_unavailable")
            return {}
        times = self._recall(times, users, tenants, now)
        found: dict[str, float] = {}
        for account_id, info in accounts.items():
            at = times.of_account(info.tenant_id, info.owner_user_id, info.scope == "shared")
            if at is not None:
                found[account_id] = at
        return found

    def _mail(self, accounts: Mapping[str, AccountInfo], now: float) -> dict[str, float]:
        try:
            recent = self._read_model.recent_mail(now - self._recent_mail_window)
        except Exception as error:  # an outage (or a bug): the tiers keep what they knew
            log.warning("tiers.mail_unreadable error=%s", type(error).__name__)
            return {}
        return {a: at for a, at in recent.items() if a in accounts}

    def _recall(
        self, times: ActiveTimes, users: set[UserKey], tenants: set[str], now: float
    ) -> ActiveTimes:
        """The store's answer with what this worker read before and the store lost; the
        lost part is written back."""
        horizon = now - self._activity.window
        lost_users = {
            k: at
            for k, at in self._known.users.items()
            if k in users and at > horizon and times.users.get(k, horizon) < at
        }
        lost_tenants = {
            k: at
            for k, at in self._known.tenants.items()
            if k in tenants and at > horizon and times.tenants.get(k, horizon) < at
        }
        if lost_users or lost_tenants:
            log.warning(
                "tiers.activity_restored users=%d tenants=%d", len(lost_users), len(lost_tenants)
            )
            self._activity.restore(lost_users, lost_tenants, now)
            times = ActiveTimes({**times.users, **lost_users}, {**times.tenants, **lost_tenants})
        self._known = times
        return times
