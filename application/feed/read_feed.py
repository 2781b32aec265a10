"""read-feed: a tenant's feed items after a sequence, personal data revealed.

Reading the feed needs TenantAdmin (SystemAdmin in the system tenant): it carries every
account's mail, user-scoped ones included. A field whose key was shredded reads as
null, so one erased account never breaks the read of the others' items.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field

from application.context import Context
from application.custom_fields.sealing import opener
from application.feed.items import JSON_KEYS
from application.payloads import Payload as Base
from application.privacy import KeyErased
from application.result import Result, forbidden
from application.users import SYSTEM_ADMIN, TENANT_ADMIN, User

NAME = "read-feed"

MAX_SEQUENCE = 2**53 - 1


class Payload(Base):
    after: Annotated[int, Field(ge=0, le=MAX_SEQUENCE)] = 0
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


def may_read(user: User) -> bool:
    return TENANT_ADMIN in user.roles or (user.in_system_tenant and SYSTEM_ADMIN in user.roles)


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not may_read(user):
        return forbidden()
    rows = ctx.feed.items(user.tenant_id, payload.after, payload.limit)
    items = [served_item(ctx, row) for row in rows]
    next_after = items[-1]["sequence"] if items else payload.after
    return Result.ok({"items": items, "nextAfter": next_after})


def served_item(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    """A read-model row as the tenant is served it (also the webhook body)."""
    data = dict(row["data"])
    if row["type"] == "custom_field_value.set" or (
        row["type"] == "custom_field_value.expired" and data.get("value") is not None
    ):
        cells = {data["fieldKey"]: data["value"]}
        opened = opener(ctx, row["tenantId"], data["entityName"])(data["entityId"], cells)
        data["value"] = opened[data["fieldKey"]]
    else:
        owner = (row["tenantId"], row["accountId"])
        for key in row["sealed"]:
            data[key] = _reveal(ctx, data.get(key), owner, json_value=key in JSON_KEYS)
    return {
        "id": row["id"],
        "sequence": row["sequence"],
        "type": row["type"],
        "tenantId": row["tenantId"],
        "occurredAt": row["occurredAt"],
        "data": data,
    }


def _reveal(ctx: Context, token: Any, owner: tuple[str, str | None], *, json_value: bool) -> Any:
    if not isinstance(token, str):
        return None
    try:
        plain = ctx.mail.cipher.reveal(token, *owner)
    except KeyErased:
        return None
    if plain is None or not json_value:
        return plain
    return json.loads(plain)
