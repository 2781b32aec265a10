"""define-tenant-field: a tenant adds a field to one of its entities."""

from application.context import Context
from application.custom_fields import definitions
from application.custom_fields.definitions import DefinitionPayload as Payload
from application.result import Result
from application.users import User

NAME = "define-tenant-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = definitions.check_tenant_definition_writer(user, ctx)
    return denied or definitions.define(payload, user.tenant_id, "tenant", ctx)
