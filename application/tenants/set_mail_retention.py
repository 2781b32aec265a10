"""set-mail-retention: a tenant's own mail retention (TenantAdmin of the tenant).

``mailRetention``: ``{"bodiesFor": keepFor | null, "messagesFor": keepFor | null}``
within ``domain.mail_retention``'s bounds (each 30 days to 10 years, null: kept for
ever; ``messagesFor`` not shorter than ``bodiesFor``), or null: the operator's default
again. Answers the policy that now applies, as get-mail-retention does.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, invalid_payload
from application.streams import commit, load, retrying
from application.tenants.mail_retention import view
from application.users import TENANT_ADMIN, User
from domain.mail_retention import MailRetention, TenantMailRetention
from domain.retention import InvalidRetention

NAME = "set-mail-retention"

KeepFor = Annotated[str, StringConstraints(max_length=8)]  # "30d".."10y"


class PolicyPayload(Base):
    bodies_for: KeepFor | None
    messages_for: KeepFor | None


class Payload(Base):
    mail_retention: PolicyPayload | None  # None: the operator's default


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if TENANT_ADMIN not in user.roles:
        return forbidden()
    policy = None
    if payload.mail_retention is not None:
        try:
            policy = MailRetention(
                bodies_for=payload.mail_retention.bodies_for,
                messages_for=payload.mail_retention.messages_for,
            )
        except InvalidRetention as invalid:
            return invalid_payload([{"path": "mailRetention", "message": str(invalid)}])

    def attempt() -> Result:
        stream = load(ctx.store, TenantMailRetention, TenantMailRetention.id_for(user.tenant_id))
        stream.set(tenant_id=user.tenant_id, policy=policy, by=user.id, now=ctx.clock.now())
        commit(ctx.store, stream)
        return Result.ok(view(stream.policy, ctx))

    return retrying(attempt)
