"""delete-webhook: stop deliveries to a webhook and forget it and its deliveries."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import User
from application.webhooks import access

NAME = "delete-webhook"


class Payload(Base):
    webhook_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    if not ctx.webhooks.delete(user.tenant_id, payload.webhook_id):
        return not_found("webhook")
    return Result.ok({"webhookId": payload.webhook_id, "deleted": True})
