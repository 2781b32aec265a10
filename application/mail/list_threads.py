"""list-threads: conversations, most recent first."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from application.context import Context
from application.mail.access import reveal
from application.mail.listing import list_scope
from application.paging import DEFAULT_LIMIT, MAX_LIMIT, take_page
from application.payloads import Payload as Base
from application.result import Result
from application.users import User

NAME = "list-threads"


class Payload(Base):
    account_id: str | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: str | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    scope = list_scope(ctx, user, payload.account_id, payload.cursor)
    if isinstance(scope, Result):
        return scope
    rows = ctx.mail.read_model.threads(
        user.tenant_id, account_ids=scope.account_ids, limit=payload.limit + 1, after=scope.after
    )
    rows, next_cursor = take_page(
        rows, payload.limit, lambda r: [r["lastReceivedAt"], r["threadKey"]]
    )
    items = [
        {
            "threadKey": r["threadKey"],
            "accountId": r["accountId"],
            "messageCount": r["messageCount"],
            "lastReceivedAt": r["lastReceivedAt"],
            "subject": (reveal(ctx, r["subject"], user.tenant_id, r["accountId"]) or "")
            if r["subject"]
            else "",
        }
        for r in rows
    ]
    return Result.ok({"items": items, "nextCursor": next_cursor})
