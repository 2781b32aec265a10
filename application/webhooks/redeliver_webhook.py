"""redeliver-webhook: send a delivered or dead delivery again (attempts start over).

The delivery becomes pending and due now. It keeps its place in its order: later
pending deliveries of the same account wait for it again.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import User
from application.webhooks import access
from application.webhooks.views import delivery_view

NAME = "redeliver-webhook"


class Payload(Base):
    delivery_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    record = ctx.webhooks.redeliver(
        user.tenant_id, payload.delivery_id, ctx.clock.now().timestamp()
    )
    if record is None:
        return not_found("delivery")
    return Result.ok(delivery_view(record))
