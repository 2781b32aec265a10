"""update-tenant-field: change a tenant field's options (never its type); last write wins."""

from application.context import Context
from application.custom_fields import definitions
from application.custom_fields.definitions import DefinitionPayload as Payload
from application.result import Result
from application.users import User

NAME = "update-tenant-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = definitions.check_tenant_definition_writer(user, ctx)
    return denied or definitions.update(payload, user.tenant_id, ctx)
