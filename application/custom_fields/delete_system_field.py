"""delete-system-field: remove a system field; its values go in every tenant."""

from application.context import Context
from application.custom_fields import definitions
from application.custom_fields.definitions import FieldRef as Payload
from application.result import Result
from application.users import SYSTEM_TENANT_ID, User

NAME = "delete-system-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = definitions.check_system_definition_writer(user)
    return denied or definitions.delete(payload, SYSTEM_TENANT_ID, ctx)
