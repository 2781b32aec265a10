"""list-mail-accounts: the accounts the caller may see, with status and health.

Without ``limit`` every visible account is answered (as before); with it, a page of
them from ``cursor`` (an offset, as the previous page's ``nextCursor`` gave it). The
filters narrow before the page is cut: ``status``, ``accountIds`` (at most 1,000) and
``search`` (case-insensitive, within the display name, the address or the id). Only the
accounts answered are opened (their sealed names, addresses and user names) and looked
up for health, so a page of 50 out of 10,000 opens 50; ``search`` opens the names and
addresses of the accounts it looks through. ``total`` counts the accounts that matched,
``statusCounts`` every visible account by status (the filters aside).
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from application.context import Context
from application.mail.access import can_see, reveal
from application.mail.views import account_view
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import KNOWN_ROLES, User

NAME = "list-mail-accounts"

Status = Literal["active", "auth_error", "reauth_required", "disconnected"]


class Payload(Base):
    search: Annotated[str, StringConstraints(max_length=200)] | None = None
    status: Status | None = None
    account_ids: (
        Annotated[
            list[Annotated[str, StringConstraints(min_length=1, max_length=64)]],
            Field(max_length=1000),
        ]
        | None
    ) = None
    cursor: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    visible = [
        row
        for row in ctx.mail.read_model.accounts(user.tenant_id)
        if can_see(user, row["tenantId"], row["scope"], row["ownerUserId"])
    ]
    counts = Counter(str(row["status"]) for row in visible)
    rows = _filtered(ctx, visible, payload)
    start = int(payload.cursor) if payload.cursor else 0
    end = len(rows) if payload.limit is None else start + payload.limit
    chosen = rows[start:end]
    ids = [row["accountId"] for row in chosen]
    health = ctx.mail.state.health(ids)
    folders = ctx.mail.folders.health(ids) if ctx.mail.folders is not None else {}
    named = ctx.mail.read_model.account_folders(ids)
    items = [
        {
            **account_view(
                ctx, row, health.get(row["accountId"]), folders.get(row["accountId"], [])
            ),
            "folders": named.get(row["accountId"], []),
        }
        for row in chosen
    ]
    return Result.ok(
        {
            "items": items,
            "nextCursor": str(end) if end < len(rows) else None,
            "total": len(rows),
            "statusCounts": dict(sorted(counts.items())),
        }
    )


def _filtered(ctx: Context, rows: list[dict[str, Any]], payload: Payload) -> list[dict[str, Any]]:
    if payload.status is not None:
        rows = [row for row in rows if row["status"] == payload.status]
    if payload.account_ids is not None:
        wanted = set(payload.account_ids)
        rows = [row for row in rows if row["accountId"] in wanted]
    needle = (payload.search or "").strip().casefold()
    if needle:
        rows = [row for row in rows if _mentions(ctx, row, needle)]
    return rows


def _mentions(ctx: Context, row: dict[str, Any], needle: str) -> bool:
    if needle in str(row["accountId"]).casefold():
        return True
    owner = row["tenantId"], row["accountId"]
    return any(
        needle in (reveal(ctx, row[field], *owner) or "").casefold()
        for field in ("displayName", "address")
    )
