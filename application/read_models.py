"""The operator's view of the read models: their lag, the events they set aside, and
retrying one of those (the console's projections page).

The read models are the whole installation's, so only a SystemAdmin of the system
tenant sees them or retries; anyone else is refused (403) before anything is read, as
``shred-tenant`` is. These are not HTTP use cases (the CLI's ``tidings projections`` is
their other door); they answer ``Result`` like the handlers do.
"""

from __future__ import annotations

from typing import Any

from application.ports import Projections, Quarantined
from application.result import Result, forbidden, not_found
from application.users import SYSTEM_ADMIN, User

MAX_LISTED = 1000


def may_see(user: User) -> bool:
    return user.in_system_tenant and SYSTEM_ADMIN in user.roles


def status(projections: Projections, user: User) -> Result:
    if not may_see(user):
        return forbidden()
    return Result.ok(
        {
            "readModels": [
                {
                    "name": row.name,
                    "position": row.position,
                    "head": row.head,
                    "lag": row.lag,
                    "quarantined": row.quarantined,
                }
                for row in projections.status()
            ]
        }
    )


def quarantined_item(q: Quarantined) -> dict[str, Any]:
    """A quarantined event as the console and ``tidings projections quarantine list``
    show it."""
    return {
        "projection": q.projection,
        "position": q.position,
        "tenantId": q.tenant_id,
        "topic": q.topic,
        "errorClass": q.error_class,
        "errorMessage": q.error_message,
        "quarantinedAt": q.quarantined_at,
    }


def quarantined(projections: Projections, user: User, limit: int = 100) -> Result:
    if not may_see(user):
        return forbidden()
    rows = projections.quarantined(None, max(1, min(limit, MAX_LISTED)))
    return Result.ok({"events": [quarantined_item(q) for q in rows]})


def retry(projections: Projections, user: User, name: str, position: int) -> Result:
    if not may_see(user):
        return forbidden()
    if name not in {row.name for row in projections.status()}:
        return not_found(f"read model {name}")
    outcome = projections.retry(name, position)
    if outcome == "absent":
        return not_found("quarantined event")
    return Result.ok({"projection": name, "position": position, "outcome": outcome})
