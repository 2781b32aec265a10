"""list-tenant-health: every tenant's mail health at a glance, for the operator (the
system tenant's SystemAdmin only; 403 for anyone else).

Per tenant: its accounts by status, how many are failing now (a consecutive failure or
more) and by which error kind, its active accounts' oldest last sync and how many never
synced yet. Counts and ids only: no name, address or other sealed field is opened, so
the operator sees health, never a tenant's personal data. A page of tenants
(``limit``, ``cursor``), in id order.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from application.context import Context
from application.mail.state import MailboxHealth
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import SYSTEM_ADMIN, User

NAME = "list-tenant-health"
APPENDS = False
HEALTH_CHUNK = 5000  # ids per health read (SQLite bounds a statement's parameters)


class Payload(Base):
    cursor: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if SYSTEM_ADMIN not in user.roles or not user.in_system_tenant:
        return forbidden()
    rows = ctx.mail.read_model.accounts(None)
    ids = [row["accountId"] for row in rows]
    health: dict[str, MailboxHealth] = {}
    for start in range(0, len(ids), HEALTH_CHUNK):
        health |= ctx.mail.state.health(ids[start : start + HEALTH_CHUNK])
    tenants: dict[str, dict[str, Any]] = {}
    for row in rows:
        tenant = tenants.setdefault(
            row["tenantId"],
            {
                "statuses": Counter(),
                "failing": Counter(),
                "oldest": None,
                "never": 0,
                "accounts": 0,
            },
        )
        tenant["accounts"] += 1
        tenant["statuses"][str(row["status"])] += 1
        seen = health.get(row["accountId"])
        if seen is not None and seen.consecutive_failures > 0:
            tenant["failing"][seen.last_error_kind or "error"] += 1
        if row["status"] != "active":
            continue
        synced = seen.last_sync_at if seen is not None else None
        if synced is None:
            tenant["never"] += 1
        elif tenant["oldest"] is None or synced < tenant["oldest"]:
            tenant["oldest"] = synced
    names = sorted(tenants)
    start = int(payload.cursor) if payload.cursor else 0
    end = start + payload.limit
    return Result.ok(
        {
            "items": [_view(name, tenants[name]) for name in names[start:end]],
            "nextCursor": str(end) if end < len(names) else None,
            "total": len(names),
        }
    )


def _view(name: str, tenant: dict[str, Any]) -> dict[str, Any]:
    oldest: datetime | None = tenant["oldest"]
    return {
        "tenantId": name,
        "accounts": tenant["accounts"],
        "statusCounts": dict(sorted(tenant["statuses"].items())),
        "failing": sum(tenant["failing"].values()),
        "failingByKind": dict(sorted(tenant["failing"].items())),
        "oldestSyncAt": None if oldest is None else oldest.isoformat(),  # of active ones
        "neverSynced": tenant["never"],  # active accounts without a sync yet
    }
