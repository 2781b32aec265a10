"""update-webhook: change a webhook's URL, event filters, description or enabled flag.

A new URL passes the same checks as at creation. Pending deliveries keep their place:
they go to the new URL at their next attempt.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import User
from application.webhooks import access
from application.webhooks.create_webhook import Filter
from application.webhooks.views import webhook_view
from domain.webhook import MAX_EVENT_FILTERS, MAX_URL_LENGTH

NAME = "update-webhook"


class Payload(Base):
    webhook_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    url: Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL_LENGTH)] | None = None
    events: Annotated[list[Filter], Field(min_length=1, max_length=MAX_EVENT_FILTERS)] | None = None
    description: Annotated[str, StringConstraints(max_length=500)] | None = None
    enabled: bool | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    if ctx.webhooks.get(user.tenant_id, payload.webhook_id) is None:
        return not_found("webhook")
    if payload.url is not None:
        refused = access.checked_url(ctx, payload.url)
        if refused is not None:
            return refused
    events: list[str] | None = None
    if payload.events is not None:
        checked = access.checked_filters(payload.events)
        if isinstance(checked, Result):
            return checked
        events = checked
    changed = ctx.webhooks.update(
        user.tenant_id,
        payload.webhook_id,
        url=payload.url,
        events=events,
        description=payload.description,
        enabled=payload.enabled,
    )
    record = ctx.webhooks.get(user.tenant_id, payload.webhook_id)
    if not changed or record is None:
        return not_found("webhook")
    return Result.ok(webhook_view(record))
