"""sync-account-now: ask the owning worker to poll the account (and ensure its watch)."""

from application.context import Context
from application.mail.access import load_managed
from application.mail.lifecycle import AccountRef as Payload
from application.result import Result
from application.signals import Signal
from application.users import User

NAME = "sync-account-now"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    account = load_managed(ctx, user, payload.account_id)
    if isinstance(account, Result):
        return account
    if account.status != "active":
        return Result.fail(
            "account_not_active",
            422,
            f"the account is {account.status}; reconnect it first",
            accountStatus=account.status,
        )
    account_id = str(account.id)  # canonical: workers match signals on it
    ctx.mail.signals.publish(Signal("sync_now", account.tenant_id, account_id=account_id))
    return Result.ok({"accountId": account_id, "requested": True})
