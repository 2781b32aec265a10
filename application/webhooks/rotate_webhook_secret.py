"""rotate-webhook-secret: a new signing secret, answered once; the old one stops at once."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import User
from application.webhooks import access

NAME = "rotate-webhook-secret"


class Payload(Base):
    webhook_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    if ctx.webhooks.get(user.tenant_id, payload.webhook_id) is None:
        return not_found("webhook")
    secret = access.new_secret()
    sealed = ctx.cipher.seal(user.tenant_id, None, secret, access.SECRET_PURPOSE)
    if not ctx.webhooks.set_secret(user.tenant_id, payload.webhook_id, sealed):
        return not_found("webhook")
    return Result.ok({"webhookId": payload.webhook_id, "secret": secret})
