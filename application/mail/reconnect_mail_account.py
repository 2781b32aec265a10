"""reconnect-mail-account: back to active after an auth error or a disconnect."""

from application.context import Context
from application.mail.lifecycle import AccountRef as Payload
from application.mail.lifecycle import change
from application.result import Result
from application.users import User
from domain.mail_account import MailAccount

NAME = "reconnect-mail-account"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    def decide(account: MailAccount) -> Result:
        changed = account.reconnect(now=ctx.clock.now())
        return Result.ok({"accountId": payload.account_id, "alreadyActive": not changed})

    return change(ctx, user, payload.account_id, decide)
