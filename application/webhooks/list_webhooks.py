"""list-webhooks: the caller's tenant's webhooks (secrets are never listed)."""

from __future__ import annotations

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import User
from application.webhooks import access
from application.webhooks.views import webhook_view

NAME = "list-webhooks"


class Payload(Base):
    pass


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    return Result.ok({"webhooks": [webhook_view(r) for r in ctx.webhooks.all_of(user.tenant_id)]})
