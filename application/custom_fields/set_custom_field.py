"""set-custom-field: validate a value against its definition and record it on the entity."""

from __future__ import annotations

from typing import Any

from application.context import Context
from application.custom_fields.values import ValueRef, gate
from application.result import Result
from application.streams import commit, load, retrying
from application.users import User
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.field_types import Invalid, validate_value

NAME = "set-custom-field"


class Payload(ValueRef):
    value: Any


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    definition = gate(payload, user, ctx)
    if isinstance(definition, Result):
        return definition
    spec = definition.spec
    try:
        value = validate_value(spec, payload.value, max_text_bytes=ctx.policy.max_text_bytes)
    except Invalid as invalid:
        return Result.fail(
            "custom_field_value_invalid",
            422,
            str(invalid),
            fieldKey=payload.field_key,
            fieldType=spec.type,
            issues=invalid.issues,
        )
    stream = entity_stream_id(user.tenant_id, payload.entity_name, payload.entity_id)

    def attempt() -> Result:
        entity = load(ctx.store, EntityCustomFields, stream)
        entity.set_value(
            tenant_id=user.tenant_id,
            entity_name=payload.entity_name,
            entity_id=payload.entity_id,
            field_key=payload.field_key,
            definition_id=definition.id,
            generation=definition.generation,
            value=value,
            now=ctx.clock.now(),
        )
        commit(ctx.store, entity)
        return Result.ok(
            {
                "entityName": payload.entity_name,
                "entityId": payload.entity_id,
                "fieldKey": payload.field_key,
                "value": value,
            }
        )

    return retrying(attempt)
