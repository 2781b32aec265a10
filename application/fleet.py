"""The operator's view of the worker fleet: each live worker, the accounts it watches
(the leases it holds) and its logins a second, from the workers' own heartbeats.

The fleet serves every tenant, so only a SystemAdmin of the system tenant sees it
(403 for anyone else). Without a fleet registry (no Redis: one process runs
everything) the answer says so instead of inventing a fleet; a registry that cannot be
read answers 503, like any store that is down.
"""

from __future__ import annotations

from application.leases import FleetView, LeaseBackendUnavailable
from application.read_models import may_see
from application.result import Result, forbidden
from application.users import User


def fleet_status(fleet: FleetView | None, user: User, now: float) -> Result:
    if not may_see(user):
        return forbidden()
    if fleet is None:
        return Result.ok({"registry": False, "workers": [], "accounts": 0, "loginRate": None})
    try:
        seen = fleet.workers()
    except LeaseBackendUnavailable:
        return Result.fail("unavailable", 503, "the fleet registry is unavailable; try again")
    rates = [w.login_rate for w in seen if w.login_rate is not None]
    return Result.ok(
        {
            "registry": True,
            "workers": [
                {
                    "workerId": w.worker_id,
                    "accounts": w.held,
                    "secondsSinceHeartbeat": round(max(0.0, now - w.seen_at), 1),
                    "loginRate": w.login_rate,
                }
                for w in seen
            ],
            "accounts": sum(w.held for w in seen),
            "loginRate": round(sum(rates), 3) if rates else None,
        }
    )
