"""disconnect-mail-account: stop syncing (idempotent); the owning worker tears down."""

from application.context import Context
from application.mail.lifecycle import AccountRef as Payload
from application.mail.lifecycle import change
from application.result import Result
from application.users import User
from domain.mail_account import MailAccount

NAME = "disconnect-mail-account"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    def decide(account: MailAccount) -> Result:
        was_connected = account.disconnect(now=ctx.clock.now())
        return Result.ok(
            {"accountId": payload.account_id, "alreadyDisconnected": not was_connected}
        )

    return change(ctx, user, payload.account_id, decide)
