"""delete-mail-account: teardown, messages leave the read models, PII is shredded."""

from application.context import Context
from application.mail.access import load_managed
from application.mail.lifecycle import AccountRef as Payload
from application.mail.lifecycle import change
from application.result import Result
from application.users import User
from domain.mail_account import MailAccount

NAME = "delete-mail-account"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    account = load_managed(ctx, user, payload.account_id)
    if isinstance(account, Result):
        return account
    # Shred first: if the event then fails to commit, the account still exists with
    # its data already unreadable, and deleting again completes the job.
    ctx.mail.cipher.shred_account(account.tenant_id, payload.account_id)
    ctx.mail.secrets.delete(payload.account_id)

    def decide(account: MailAccount) -> Result:
        account.delete(now=ctx.clock.now())
        return Result.ok({"accountId": payload.account_id, "deleted": True})

    result = change(ctx, user, payload.account_id, decide)
    if result.is_success:
        ctx.mail.state.forget(payload.account_id)
    return result
