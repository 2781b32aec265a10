"""list-webhook-deliveries: one webhook's deliveries in feed order, optionally by state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import User
from application.webhooks import access
from application.webhooks.views import delivery_view

NAME = "list-webhook-deliveries"


class Payload(Base):
    webhook_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    state: Literal["pending", "delivered", "dead"] | None = None
    after: Annotated[int, Field(ge=0, le=2**53 - 1)] = 0
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    if ctx.webhooks.get(user.tenant_id, payload.webhook_id) is None:
        return not_found("webhook")
    rows = ctx.webhooks.deliveries(
        user.tenant_id, payload.webhook_id, payload.state, payload.after, payload.limit
    )
    views = [delivery_view(row) for row in rows]
    return Result.ok(
        {"deliveries": views, "nextAfter": rows[-1].sequence if rows else payload.after}
    )
