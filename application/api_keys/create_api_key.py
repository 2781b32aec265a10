"""create-api-key: a key acting as a user of the caller's tenant with the given roles.

A caller can hand out only roles it holds itself, so a key never escalates. A tenant
holds at most ``api_keys_per_tenant`` active keys (422 ``api_key_limit``); the key is
listed in the tenant's catalog with its creator in the same append, so revoking a key
revokes what it minted.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from application.api_keys import keys
from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.streams import commit, load, retrying
from application.users import KNOWN_ROLES, User
from domain.api_key import ApiKey, ApiKeyCatalog

NAME = "create-api-key"

Role = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Payload(Base):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    roles: Annotated[list[Role], Field(min_length=1, max_length=8)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not keys.may_manage(user):
        return forbidden()
    roles = frozenset(payload.roles)
    unknown = sorted(roles - KNOWN_ROLES)
    if unknown:
        return Result.fail(
            "invalid_payload",
            400,
            "the payload is invalid",
            errors=[{"path": "roles", "message": f"unknown roles: {', '.join(unknown)}"}],
        )
    if not roles <= user.roles:
        return Result.fail(
            "role_not_held",
            422,
            "a key can only be given roles its creator holds",
            roles=sorted(roles - user.roles),
        )
    new = keys.new_key()
    digest = keys.digest(new.secret)

    def attempt() -> Result:
        catalog = load(ctx.store, ApiKeyCatalog, ApiKeyCatalog.id_for(user.tenant_id))
        limit = ctx.policy.api_keys_per_tenant
        if len(catalog.active) >= limit:
            return Result.fail(
                "api_key_limit", 422, "the tenant holds as many keys as allowed", limit=limit
            )
        now = ctx.clock.now()
        api_key = ApiKey(new.key_id)
        api_key.create(
            tenant_id=user.tenant_id,
            name=payload.name,
            roles=roles,
            secret_digest=digest,
            created_by=user.id,
            now=now,
        )
        catalog.add(str(new.key_id), created_by=user.id, now=now)
        commit(ctx.store, api_key, catalog)  # a racing create conflicts on the catalog
        return Result.ok({"apiKeyId": str(new.key_id), "key": new.text, "roles": sorted(roles)})

    return retrying(attempt)
