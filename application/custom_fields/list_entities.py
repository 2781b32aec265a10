"""list-entities: entities with their values, filtered on searchable fields, paged."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from application.context import Context
from application.custom_fields.definitions import Key, check_reader
from application.custom_fields.sealing import matches, opener
from application.paging import DEFAULT_LIMIT, MAX_LIMIT, BadCursor, decode_cursor, take_page
from application.payloads import Payload as Base
from application.result import Result, invalid_payload
from application.users import User
from domain.field_types import Invalid, check_field_spec, validate_value

NAME = "list-entities"


class Payload(Base):
    entity_name: Key
    where: dict[str, Any] = Field(default_factory=dict)
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: str | None = None


def canonical_filter(payload: Payload, user: User, ctx: Context) -> dict[str, Any] | Result | None:
    """Each filter value in its field's stored (canonical) form, so ``1`` finds ``1.0``
    and a money object matches whatever its key order. None: a value the field could
    never hold (``"1"`` for a number — no coercion), which matches nothing."""
    # A key's governing definition is the tenant's own, else the system's: the one
    # set-custom-field validates with (``values.active_definition``).
    governing: dict[str, dict[str, Any]] = {}
    for d in ctx.custom_fields.list_definitions(user.tenant_id, payload.entity_name):
        if d["scope"] == "tenant" or d["fieldKey"] not in governing:
            governing[d["fieldKey"]] = d
    fields = {key: d["field"] for key, d in governing.items() if d["searchable"]}
    unsearchable = sorted(set(payload.where) - set(fields))
    if unsearchable:
        return Result.fail(
            "field_not_searchable",
            422,
            f"not searchable fields: {', '.join(unsearchable)}",
            fieldKeys=unsearchable,
        )
    where: dict[str, Any] = {}
    for key, value in payload.where.items():
        options = {k: v for k, v in fields[key].items() if k not in ("type", "fieldAccess")}
        spec = check_field_spec(fields[key]["type"], options)
        try:
            where[key] = validate_value(spec, value)
        except Invalid:
            return None
    return where


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
    where = canonical_filter(payload, user, ctx) if payload.where else {}
    if isinstance(where, Result):
        return where
    if where is None:
        return Result.ok({"items": [], "nextCursor": None})
    items = ctx.custom_fields.list_entities(
        user.tenant_id,
        payload.entity_name,
        matches(ctx, user.tenant_id, payload.entity_name, where),
        payload.limit + 1,
        after,
    )
    items, next_cursor = take_page(items, payload.limit, lambda item: item["entityId"])
    open_cells = opener(ctx, user.tenant_id, payload.entity_name)
    opened = [
        {**item, "customFields": open_cells(item["entityId"], item["customFields"])}
        for item in items
    ]
    return Result.ok({"items": opened, "nextCursor": next_cursor})
