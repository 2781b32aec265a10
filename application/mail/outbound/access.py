"""Who may send from, and see the outbox of, which mail account.

Sending: the owner of a user account; for a shared account, any user of the tenant with
one of the ``send_roles`` (TenantAdmin and TenantMember unless configured). Seeing the
outbox follows seeing the account (``application.mail.access``). Another tenant's
account, or one the caller may not see, answers 404.
"""

from __future__ import annotations

from application.context import Context
from application.mail.access import can_see, parse_account_id
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import User
from domain.mail_account import MailAccount


def can_send(ctx: Context, user: User, account: MailAccount) -> bool:
    if user.tenant_id != account.tenant_id:
        return False
    if account.scope == "user":
        return account.owner_user_id == user.id
    return user.has_any(ctx.policy.send_roles)


def load_sendable(ctx: Context, user: User, account_id: str) -> MailAccount | Result:
    """The account, if the caller may send from it now; else the Result to answer."""
    stream = parse_account_id(account_id)
    if stream is None:
        return not_found(f"mail account {account_id}")
    account = load(ctx.store, MailAccount, stream)
    if not account.exists or not can_see(
        user, account.tenant_id, account.scope, account.owner_user_id
    ):
        return not_found(f"mail account {account_id}")
    if not can_send(ctx, user, account):
        return forbidden()
    if account.status != "active":
        return Result.fail(
            "account_not_active",
            422,
            f"the account is {account.status}; reconnect it first",
            accountStatus=account.status,
        )
    return account
