"""reconnect-mail-account: back to active after an auth error, a refused OAuth2 grant
(``reauth_required``, with a new ``refreshToken``) or a disconnect. Ids, cursor and
messages are kept: the account resumes where it was, re-ingesting nothing."""

from __future__ import annotations

from application.context import Context
from application.mail.connect_mail_account import Secret, store_new_refresh_token
from application.mail.lifecycle import AccountRef, change
from application.result import Result
from application.users import User
from domain.mail_account import MailAccount

NAME = "reconnect-mail-account"


class Payload(AccountRef):
    refresh_token: Secret | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    def decide(account: MailAccount) -> Result:
        if payload.refresh_token is not None and account.exists:
            token = payload.refresh_token.get_secret_value()
            if refused := store_new_refresh_token(ctx, account, token):
                return refused
        changed = account.reconnect(now=ctx.clock.now())
        return Result.ok({"accountId": payload.account_id, "alreadyActive": not changed})

    return change(ctx, user, payload.account_id, decide)
