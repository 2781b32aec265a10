"""list-entities: entities with their values, filtered on searchable fields, paged."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from application.context import Context
from application.custom_fields.definitions import Key, check_reader
from application.paging import DEFAULT_LIMIT, MAX_LIMIT, BadCursor, decode_cursor, encode_cursor
from application.payloads import Payload as Base
from application.result import Result, invalid_payload
from application.users import User

NAME = "list-entities"


class Payload(Base):
    entity_name: Key
    where: dict[str, Any] = Field(default_factory=dict)
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: str | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = check_reader(user, ctx)
    if denied:
        return denied
    after: str | None = None
    if payload.cursor is not None:
        try:
            after = decode_cursor(payload.cursor)
        except BadCursor:
            after = None
        if not isinstance(after, str):
            return invalid_payload([{"path": "cursor", "message": "not a cursor from this list"}])
    if payload.where:
        searchable = ctx.custom_fields.searchable_keys(user.tenant_id, payload.entity_name)
        unsearchable = sorted(set(payload.where) - searchable)
        if unsearchable:
            return Result.fail(
                "field_not_searchable",
                422,
                f"not searchable fields: {', '.join(unsearchable)}",
                fieldKeys=unsearchable,
            )
    items = ctx.custom_fields.list_entities(
        user.tenant_id, payload.entity_name, payload.where, payload.limit + 1, after
    )
    more = len(items) > payload.limit
    items = items[: payload.limit]
    next_cursor = encode_cursor(items[-1]["entityId"]) if more else None
    return Result.ok({"items": items, "nextCursor": next_cursor})
