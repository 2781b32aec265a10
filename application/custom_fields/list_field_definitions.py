"""list-field-definitions: the tenant's and the system's active definitions."""

from application.context import Context
from application.custom_fields.definitions import Key
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.users import KNOWN_ROLES, User

NAME = "list-field-definitions"


class Payload(Base):
    entity_name: Key | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    items = ctx.custom_fields.list_definitions(user.tenant_id, payload.entity_name)
    return Result.ok({"items": items, "nextCursor": None})
