"""user-active: the caller is active now; its accounts become hot.

Cheap: one write to the shared activity store (every worker reads it each fleet tick, a
restarted fleet included) and one signal (the owning worker acts within seconds), both
best effort: with Redis neither waits for its round trip."""

from application.context import Context
from application.payloads import EmptyPayload as Payload
from application.result import Result, forbidden
from application.signals import Signal
from application.users import KNOWN_ROLES, User

NAME = "user-active"
APPENDS = False  # nothing in the log: an inline read model has nothing to catch up


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    ctx.mail.activity.record(user.tenant_id, user.id, ctx.clock.now().timestamp())
    ctx.mail.signals.publish(Signal("user_active", user.tenant_id, user_id=user.id))
    return Result.ok({"userId": user.id})
