"""disconnect / reconnect / delete: account state changes that workers must hear of."""

from __future__ import annotations

from collections.abc import Callable

from application.context import Context
from application.mail.access import load_managed
from application.payloads import Payload
from application.result import Result
from application.signals import Signal
from application.streams import commit, retrying
from application.users import User
from domain.mail_account import MailAccount


class AccountRef(Payload):
    account_id: str


def change(
    ctx: Context, user: User, account_id: str, decide: Callable[[MailAccount], Result]
) -> Result:
    """Load the managed account, let ``decide`` trigger events, commit, signal."""

    def attempt() -> Result:
        account = load_managed(ctx, user, account_id)
        if isinstance(account, Result):
            return account
        result = decide(account)
        if commit(ctx.store, account):
            ctx.mail.signals.publish(
                Signal("account_changed", account.tenant_id, account_id=str(account.id))
            )
        return result

    return retrying(attempt)
