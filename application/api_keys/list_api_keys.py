"""list-api-keys: the tenant's active keys (never their secrets), so a key that should
not exist can be found and revoked."""

from __future__ import annotations

from uuid import UUID

from application.api_keys import keys
from application.context import Context
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.streams import load, replay
from application.users import User
from domain.api_key import ApiKey, ApiKeyCatalog

NAME = "list-api-keys"


class Payload(Base):
    pass


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not keys.may_manage(user):
        return forbidden()
    catalog = load(ctx.store, ApiKeyCatalog, ApiKeyCatalog.id_for(user.tenant_id))
    ids = [UUID(key_id) for key_id in catalog.active]
    streams = ctx.store.load_many(ids)
    used = ctx.key_usage.last_used(str(key_id) for key_id in ids) if ctx.key_usage else {}
    items = []
    for key_id in ids:
        api_key = replay(ApiKey, key_id, streams.get(key_id, []))
        if not api_key.active or api_key.tenant_id != user.tenant_id:
            continue
        last = used.get(str(key_id))
        items.append(
            {
                "apiKeyId": str(key_id),
                "name": api_key.name,
                "roles": sorted(api_key.roles),
                "createdBy": catalog.active[str(key_id)],
                "createdAt": api_key.created_at.isoformat() if api_key.created_at else None,
                "lastUsedAt": last.isoformat() if last else None,
            }
        )
    items.sort(key=lambda item: (item["createdAt"] or "", item["apiKeyId"]))
    return Result.ok({"items": items})
