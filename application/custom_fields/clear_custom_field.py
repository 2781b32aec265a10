"""clear-custom-field: remove one value from an entity (a no-op when there is none)."""

from application.context import Context
from application.custom_fields.values import CLEAR, write_value
from application.custom_fields.values import ValueRef as Payload
from application.result import Result
from application.users import User

NAME = "clear-custom-field"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    return write_value(payload, user, ctx, CLEAR)
