"""create-webhook: subscribe a URL to feed item types; the secret is answered once.

The URL must be http(s) and, unless private hosts are allowed, resolve to public
addresses only (checked again before every delivery: DNS answers change). The secret
is sealed under the tenant's key at rest. Delivery starts with the items that follow
the feed's head at creation: a new endpoint is not flooded with history. A tenant has
at most ``webhook_limit_per_tenant`` webhooks (the policy's): past it, 422
``cap_exceeded``, so the webhooks one tenant makes the delivery loop attempt are bounded.
"""

from __future__ import annotations

from typing import Annotated
from uuid import uuid4

from pydantic import Field, StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import User
from application.webhooks import access
from application.webhooks.ports import WebhookRecord
from application.webhooks.views import webhook_view
from domain.webhook import MAX_EVENT_FILTERS, MAX_URL_LENGTH

NAME = "create-webhook"

Filter = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class Payload(Base):
    url: Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL_LENGTH)]
    events: Annotated[list[Filter], Field(min_length=1, max_length=MAX_EVENT_FILTERS)]
    description: Annotated[str, StringConstraints(max_length=500)] = ""


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not access.may_manage(user):
        return forbidden()
    refused = access.checked_url(ctx, payload.url)
    if refused is not None:
        return refused
    events = access.checked_filters(payload.events)
    if isinstance(events, Result):
        return events
    secret = access.new_secret()
    record = WebhookRecord(
        webhook_id=str(uuid4()),
        tenant_id=user.tenant_id,
        url=payload.url,
        events=events,
        description=payload.description,
        sealed_secret=ctx.cipher.seal(user.tenant_id, None, secret, access.SECRET_PURPOSE),
        created_at=ctx.clock.now().isoformat(),
        cursor=ctx.feed.head(user.tenant_id),
    )
    limit = ctx.policy.webhook_limit_per_tenant
    current = ctx.webhooks.add(record, limit)
    if current >= limit:
        return Result.fail(
            "cap_exceeded",
            422,
            f"webhook cap {limit} reached",
            capName="webhooksPerTenant",
            limit=limit,
            current=current,
        )
    return Result.ok({**webhook_view(record), "secret": secret})
