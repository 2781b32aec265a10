"""revoke-api-key: the key, and every key it minted (and they minted), answer 401 from
now on; its open event streams end within seconds (idempotent)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from pydantic import StringConstraints

from application.api_keys import keys
from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.streams import commit, load, retrying
from application.users import User
from domain.api_key import ApiKey, ApiKeyCatalog

NAME = "revoke-api-key"


class Payload(Base):
    api_key_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not keys.may_manage(user):
        return forbidden()
    key_id = keys.parse_key_id(payload.api_key_id)
    if key_id is None:
        return not_found("api key")

    def attempt() -> Result:
        api_key = load(ctx.store, ApiKey, key_id)
        if not api_key.exists or api_key.tenant_id != user.tenant_id:
            return not_found("api key")
        now = ctx.clock.now()
        catalog = load(ctx.store, ApiKeyCatalog, ApiKeyCatalog.id_for(user.tenant_id))
        minted = [load(ctx.store, ApiKey, UUID(k)) for k in catalog.minted_by(str(key_id))]
        revoked = api_key.revoke(by=user.id, now=now)
        for child in minted:
            child.revoke(by=user.id, now=now)
        for each in (api_key, *minted):
            catalog.unlist(str(each.id), now=now)
        commit(ctx.store, api_key, *minted, catalog)
        return Result.ok(
            {
                "apiKeyId": str(key_id),
                "alreadyRevoked": not revoked,
                "alsoRevoked": sorted(str(child.id) for child in minted),
            }
        )

    return retrying(attempt)
