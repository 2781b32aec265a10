"""set-custom-field: validate a value against its definition and record it, sealed, on
the entity."""

from __future__ import annotations

from typing import Any

from application.context import Context
from application.custom_fields.values import ValueRef, write_value
from application.result import Result
from application.users import User

NAME = "set-custom-field"


class Payload(ValueRef):
    value: Any


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    return write_value(payload, user, ctx, payload.value)
