"""What set and clear share: the gates (roles, an active definition, the field's own
access), validation and sealing, and one retrying commit on the entity's stream.

The definitions (the tenant's and the system's) and the entity are read in one round
trip; a retry after a version conflict reads the entity again, alone."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, TypedDict
from uuid import UUID

from application.context import Context
from application.custom_fields.definitions import EntityId, FieldRef
from application.custom_fields.sealing import seal_value
from application.result import Result, forbidden, not_found
from application.streams import commit, load, replay, retrying
from application.users import SYSTEM_TENANT_ID, User
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.events import DomainEvent
from domain.field_definition import FieldDefinition, definition_id
from domain.field_types import Invalid, validate_value


class ValueRef(FieldRef):
    entity_id: EntityId


class ValueTarget(TypedDict):
    """The value a set or clear is about: on which entity, under which definition."""

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: UUID
    generation: int


class Clear(Enum):
    """The change of clear-custom-field (set-custom-field's is the value itself)."""

    VALUE = "clear"


CLEAR: Literal[Clear.VALUE] = Clear.VALUE


def _definition_ids(tenant_id: str, entity: str, key: str) -> tuple[UUID, UUID]:
    return definition_id(tenant_id, entity, key), definition_id(SYSTEM_TENANT_ID, entity, key)


def active_definition(
    loaded: dict[UUID, list[DomainEvent]], ids: tuple[UUID, UUID]
) -> FieldDefinition | None:
    """The tenant's own definition of the key, else the system's, if active (``ids``:
    the two definition streams, tenant first, as loaded)."""
    for stream in ids:
        definition = replay(FieldDefinition, stream, loaded[stream])
        if definition.active:
            return definition
    return None


def _writable(
    definition: FieldDefinition | None, payload: ValueRef, user: User
) -> FieldDefinition | Result:
    """The definition the caller may write this value under, or the refusal to answer."""
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


def write_value(payload: ValueRef, user: User, ctx: Context, change: Any) -> Result:
    """Set the value ``change`` (validated, then sealed), or clear it (``CLEAR``)."""
    if not user.has_any(ctx.policy.value_write_roles):
        return forbidden()
    tenant, entity_name, entity_id = user.tenant_id, payload.entity_name, payload.entity_id
    stream = entity_stream_id(tenant, entity_name, entity_id)
    ids = _definition_ids(tenant, entity_name, payload.field_key)
    loaded = ctx.store.load_many((*ids, stream))
    definition = _writable(active_definition(loaded, ids), payload, user)
    if isinstance(definition, Result):
        return definition
    answer: dict[str, Any] = {
        "entityName": entity_name,
        "entityId": entity_id,
        "fieldKey": payload.field_key,
    }
    sealed: tuple[str, str] | None = None
    if change is not CLEAR:
        spec = definition.spec
        try:
            value = validate_value(spec, change, max_text_bytes=ctx.policy.max_text_bytes)
        except Invalid as invalid:
            return Result.fail(
                "custom_field_value_invalid",
                422,
                str(invalid),
                fieldKey=payload.field_key,
                fieldType=spec.type,
                issues=invalid.issues,
            )
        sealed = seal_value(
            ctx,
            tenant,
            entity_name=entity_name,
            entity_id=entity_id,
            field_key=payload.field_key,
            value=value,
        )
        answer["value"] = value
    first: list[EntityCustomFields] = [replay(EntityCustomFields, stream, loaded[stream])]

    def attempt() -> Result:
        entity = first.pop() if first else load(ctx.store, EntityCustomFields, stream)
        target = ValueTarget(
            tenant_id=tenant,
            entity_name=entity_name,
            entity_id=entity_id,
            field_key=payload.field_key,
            definition_id=definition.id,
            generation=definition.generation,
        )
        if sealed is None:
            answer["cleared"] = entity.clear_value(**target, now=ctx.clock.now())
        else:
            entity.set_value(**target, sealed=sealed[0], digest=sealed[1], now=ctx.clock.now())
        commit(ctx.store, entity)
        return Result.ok(dict(answer))

    return retrying(attempt)
