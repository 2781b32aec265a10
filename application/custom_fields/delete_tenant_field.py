"""delete-tenant-field: remove a tenant field; projections cascade its values away."""

from application.context import Context
from application.custom_fields import definitions
from application.custom_fields.definitions import FieldRef as Payload
from application.result import Result
from application.users import User

NAME = "delete-tenant-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = definitions.check_tenant_definition_writer(user, ctx)
    return denied or definitions.delete(payload, user.tenant_id, ctx)
