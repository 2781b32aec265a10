"""delete-mail-account: teardown, messages leave the read models, PII is shredded."""

from application.context import Context
from application.mail.access import load_managed
from application.mail.lifecycle import AccountRef as Payload
from application.mail.lifecycle import change
from application.mail.ports import BlobOwner
from application.result import Result
from application.users import User
from domain.mail_account import MailAccount

NAME = "delete-mail-account"


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    account = load_managed(ctx, user, payload.account_id)
    if isinstance(account, Result):
        return account
    # The canonical id, not the payload's spelling (any form UUID() accepts): keys,
    # secrets and state are filed under it.
    account_id = str(account.id)
    # Shred first: if the event then fails to commit, the account still exists with
    # its data already unreadable, and deleting again completes the job.
    ctx.mail.cipher.shred_account(account.tenant_id, account_id)
    ctx.mail.secrets.delete(account_id)
    if ctx.mail.smtp_secrets is not None:
        ctx.mail.smtp_secrets.delete(account_id)
    ctx.mail.blobs.delete_owner(BlobOwner(account.tenant_id, account_id))

    def decide(account: MailAccount) -> Result:
        account.delete(now=ctx.clock.now())
        return Result.ok({"accountId": account_id, "deleted": True})

    result = change(ctx, user, account_id, decide)
    if result.is_success:
        ctx.mail.state.forget(account_id)
        if ctx.mail.folders is not None:
            ctx.mail.folders.forget(account_id)
        ctx.mail.deferred.forget_account(account_id)
        if ctx.mail.flags is not None:
            ctx.mail.flags.forget(account_id)
    return result
