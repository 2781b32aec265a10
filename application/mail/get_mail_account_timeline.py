"""get-mail-account-timeline: one account's recent syncs, failures and reported tiers,
counted per bucket (the console's timeline chart).

Whoever may see the account may see its timeline (it is metadata: counts, error kinds,
tiers); another tenant's account, or another user's, is 404 as everywhere else.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from application.context import Context
from application.mail.access import can_see, parse_account_id
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import KNOWN_ROLES, User
from domain.mail_account import MailAccount

NAME = "get-mail-account-timeline"
APPENDS = False


class Payload(Base):
    account_id: str
    hours: Annotated[int, Field(ge=1, le=48)] = 24


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    stream = parse_account_id(payload.account_id)
    account = load(ctx.store, MailAccount, stream) if stream is not None else None
    if (
        account is None
        or not account.exists
        or not can_see(user, account.tenant_id, account.scope, account.owner_user_id)
    ):
        return not_found(f"mail account {payload.account_id}")
    since = ctx.clock.now() - timedelta(hours=payload.hours)
    buckets: dict[int, dict[str, Any]] = {}
    for row in ctx.mail.state.timeline(str(account.id), since):
        bucket = buckets.setdefault(row.start, {"synced": 0, "failed": Counter(), "tiers": set()})
        kind, _, detail = row.kind.partition(":")
        if kind == "synced":
            bucket["synced"] += row.count
        elif kind == "failed":
            bucket["failed"][detail] += row.count
        elif kind == "tier":
            bucket["tiers"].add(detail)
    return Result.ok(
        {
            "accountId": str(account.id),
            "since": since.isoformat(),
            "buckets": [
                {
                    "start": datetime.fromtimestamp(start, UTC).isoformat(),
                    "synced": b["synced"],
                    "failed": dict(sorted(b["failed"].items())),
                    "tiers": sorted(b["tiers"]),
                }
                for start, b in sorted(buckets.items())
            ],
        }
    )
