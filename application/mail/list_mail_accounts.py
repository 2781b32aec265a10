"""list-mail-accounts: the accounts the caller may see, with status and health."""

from application.context import Context
from application.mail.access import can_see
from application.mail.views import account_view
from application.payloads import EmptyPayload as Payload
from application.result import Result, forbidden
from application.users import KNOWN_ROLES, User

NAME = "list-mail-accounts"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    rows = [
        row
        for row in ctx.mail.read_model.accounts(user.tenant_id)
        if can_see(user, row["tenantId"], row["scope"], row["ownerUserId"])
    ]
    ids = [row["accountId"] for row in rows]
    health = ctx.mail.state.health(ids)
    folders = ctx.mail.folders.health(ids) if ctx.mail.folders is not None else {}
    named = ctx.mail.read_model.account_folders(ids)
    items = [
        {
            **account_view(
                ctx, row, health.get(row["accountId"]), folders.get(row["accountId"], [])
            ),
            "folders": named.get(row["accountId"], []),
        }
        for row in rows
    ]
    return Result.ok({"items": items, "nextCursor": None})
