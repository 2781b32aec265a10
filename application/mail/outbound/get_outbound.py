"""get-outbound: one outbound message of an account the caller may see (404 otherwise)."""

from __future__ import annotations

from application.context import Context
from application.mail.access import visible_account_ids
from application.mail.outbound.views import outbound_view
from application.payloads import Payload as Base
from application.result import Result, not_found
from application.users import User

NAME = "get-outbound"


class Payload(Base):
    outbound_id: str


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    outbox = ctx.mail.outbox
    row = None if outbox is None else outbox.outbound(user.tenant_id, payload.outbound_id)
    if row is None or row["accountId"] not in visible_account_ids(ctx, user):
        return not_found(f"outbound message {payload.outbound_id}")
    return Result.ok(outbound_view(ctx, row))
