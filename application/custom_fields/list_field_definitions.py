"""list-field-definitions: the tenant's and the system's active definitions."""

from application.context import Context
from application.custom_fields.definitions import Key, check_reader
from application.payloads import Payload as Base
from application.result import Result
from application.users import User

NAME = "list-field-definitions"


class Payload(Base):
    entity_name: Key | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = check_reader(user, ctx)
    if denied:
        return denied
    items = ctx.custom_fields.list_definitions(user.tenant_id, payload.entity_name)
    return Result.ok({"items": items, "nextCursor": None})
