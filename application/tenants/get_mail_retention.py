"""get-mail-retention: the mail retention that applies to the caller's tenant, whether
it is the tenant's own (``source: tenant``) or the operator's (``source: default``),
and the operator's default beside it. Any user of the tenant may read it."""

from __future__ import annotations

from application.context import Context
from application.payloads import EmptyPayload as Payload
from application.result import Result, forbidden
from application.streams import load
from application.tenants.mail_retention import view
from application.users import KNOWN_ROLES, User
from domain.mail_retention import TenantMailRetention

NAME = "get-mail-retention"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    stream = load(ctx.store, TenantMailRetention, TenantMailRetention.id_for(user.tenant_id))
    return Result.ok(view(stream.policy, ctx))
