"""get-entity: an entity's custom-field values (404 when it never had any here)."""

from application.context import Context
from application.custom_fields.definitions import EntityId, Key, check_reader
from application.custom_fields.sealing import opener
from application.payloads import Payload as Base
from application.result import Result, not_found
from application.users import User

NAME = "get-entity"


class Payload(Base):
    entity_name: Key
    entity_id: EntityId


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = check_reader(user, ctx)
    if denied:
        return denied
    entity = ctx.custom_fields.get_entity(user.tenant_id, payload.entity_name, payload.entity_id)
    if entity is None:
        return not_found(f"{payload.entity_name} {payload.entity_id}")
    open_cells = opener(ctx, user.tenant_id, payload.entity_name)
    return Result.ok(
        {**entity, "customFields": open_cells(payload.entity_id, entity["customFields"])}
    )
