"""define-system-field: the operator adds a field to an entity in every tenant."""

from application.context import Context
from application.custom_fields import definitions
from application.custom_fields.definitions import DefinitionPayload as Payload
from application.result import Result
from application.users import SYSTEM_TENANT_ID, User

NAME = "define-system-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    denied = definitions.check_system_definition_writer(user)
    return denied or definitions.define(payload, SYSTEM_TENANT_ID, "system", ctx)
