"""clear-custom-field: remove one value from an entity (a no-op when there is none)."""

from application.context import Context
from application.custom_fields.values import ValueRef as Payload
from application.custom_fields.values import gate
from application.result import Result
from application.streams import commit, load, retrying
from application.users import User
from domain.custom_field_values import EntityCustomFields, entity_stream_id

NAME = "clear-custom-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    definition = gate(payload, user, ctx)
    if isinstance(definition, Result):
        return definition
    stream = entity_stream_id(user.tenant_id, payload.entity_name, payload.entity_id)

    def attempt() -> Result:
        entity = load(ctx.store, EntityCustomFields, stream)
        cleared = entity.clear_value(
            tenant_id=user.tenant_id,
            entity_name=payload.entity_name,
            entity_id=payload.entity_id,
            field_key=payload.field_key,
            definition_id=definition.id,
            generation=definition.generation,
            now=ctx.clock.now(),
        )
        commit(ctx.store, entity)
        return Result.ok(
            {
                "entityName": payload.entity_name,
                "entityId": payload.entity_id,
                "fieldKey": payload.field_key,
                "cleared": cleared,
            }
        )

    return retrying(attempt)
