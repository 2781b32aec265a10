"""shred-tenant: erase a tenant for good by destroying its keys (SystemAdmin only).

Everything the tenant's key sealed — custom-field values and their digests, mail
accounts' and messages' personal data, secrets and raw MIME under its account keys —
becomes unreadable at once, in events, read models, blobs and backups; queries then
answer ``[erased]`` as for a deleted account, and writes that would seal 410 ``erased``.
Ids stay. A shredded key is never re-created, so shredding is final (and idempotent).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import SYSTEM_ADMIN, SYSTEM_TENANT_ID, User

NAME = "shred-tenant"


class Payload(Base):
    tenant_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if SYSTEM_ADMIN not in user.roles or not user.in_system_tenant:
        return forbidden()
    if payload.tenant_id == SYSTEM_TENANT_ID:
        return Result.fail("system_tenant_not_allowed", 422, "the system tenant cannot be shredded")
    ctx.cipher.shred_tenant(payload.tenant_id)
    if ctx.mail_ports is not None:  # bodies still to fetch would find no key: forget them
        ctx.mail.deferred.forget_tenant(payload.tenant_id)
    return Result.ok({"tenantId": payload.tenant_id, "shredded": True})
