"""list-outbound: the outbox of the accounts the caller may see (or of one), newest
first, optionally of one state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from application.context import Context
from application.mail.access import accounts_in_scope
from application.mail.outbound.views import outbound_view
from application.payloads import Payload as Base
from application.result import Result
from application.users import User

NAME = "list-outbound"

State = Literal["queued", "sending", "sent", "retrying", "failed", "canceled", "uncertain"]


class Payload(Base):
    account_id: str | None = None
    state: State | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 100


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    accounts = accounts_in_scope(ctx, user, payload.account_id)
    if isinstance(accounts, Result):
        return accounts
    outbox = ctx.mail.outbox
    rows = (
        []
        if outbox is None
        else outbox.list_outbound(
            user.tenant_id, accounts, state=payload.state, limit=payload.limit
        )
    )
    return Result.ok({"items": [outbound_view(ctx, row) for row in rows]})
