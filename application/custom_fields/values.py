"""Shared gates of set/clear: roles, an active definition, the field's own access."""

from __future__ import annotations

from application.context import Context
from application.custom_fields.definitions import EntityId, FieldRef
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import SYSTEM_TENANT_ID, User
from domain.field_definition import FieldDefinition, definition_id


class ValueRef(FieldRef):
    entity_id: EntityId


def active_definition(
    ctx: Context, tenant_id: str, entity: str, key: str
) -> FieldDefinition | None:
    """The tenant's own definition of the key, else the system's, if active."""
    for owner in (tenant_id, SYSTEM_TENANT_ID):
        definition = load(ctx.store, FieldDefinition, definition_id(owner, entity, key))
        if definition.active:
            return definition
    return None


def gate(payload: ValueRef, user: User, ctx: Context) -> FieldDefinition | Result:
    if not user.has_any(ctx.policy.value_write_roles):
        return forbidden()
    definition = active_definition(ctx, user.tenant_id, payload.entity_name, payload.field_key)
    if definition is None or definition.settings is None:
        return not_found(f"field {payload.entity_name}.{payload.field_key}")
    required = definition.settings.write_roles
    if required is not None and not user.has_any(required):
        return Result.fail(
            "field_access_denied",
            422,
            f"writing {payload.field_key} needs one of {list(required)}",
            requiredRoles=list(required),
        )
    return definition
