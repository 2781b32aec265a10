"""update-mail-account: change name, server settings, secret or trusted authserv-id.

Pointing the account at another mailbox (host, port or username) resets its sync
cursor: UIDs of one mailbox mean nothing in another, even under an equal UIDVALIDITY.

The stored secret goes only where it was given: changing host, port, security or
username needs the secret again (422 ``secret_required``), so a repointed account
never sends the old password to a new server (or in cleartext). A new host is checked
like at connect (``host_not_allowed``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints

from application.context import Context
from application.mail.access import load_managed, reveal
from application.mail.connect_mail_account import (
    FolderSetting,
    ImapSettings,
    Secret,
    SmtpSettings,
    check_destination,
    check_host,
    store_new_refresh_token,
)
from application.payloads import Payload as Base
from application.result import Result, invalid_payload
from application.signals import Signal
from application.streams import commit, retrying
from application.users import User
from domain.mail_account import AccountDisconnected, MailAccount

NAME = "update-mail-account"


class Payload(Base):
    account_id: str
    display_name: Annotated[str, StringConstraints(max_length=200)] | None = None
    imap: ImapSettings | None = None
    secret: Secret | None = None
    refresh_token: Secret | None = None  # a new OAuth2 grant for an xoauth2 account
    trusted_authserv_id: Annotated[str, StringConstraints(max_length=255)] | None = None
    reason: Annotated[str, StringConstraints(max_length=500)] | None = None
    folders: FolderSetting | None = None
    smtp: SmtpSettings | None = None
    smtp_secret: Secret | None = None  # for SMTP instead of ``secret`` (password accounts)


def _smtp_endpoint(ctx: Context, account: MailAccount) -> tuple[Any, ...]:
    smtp, owner = account.smtp, (account.tenant_id, str(account.id))
    return (
        smtp.get("host"),
        smtp.get("port"),
        smtp.get("security"),
        reveal(ctx, smtp.get("username"), *owner),
    )


def _smtp_refused(ctx: Context, account: MailAccount, payload: Payload) -> Result | None:
    """The secret goes only where it was given: a new SMTP server gets it again (``secret``
    or ``smtpSecret``); its host obeys the IMAP host's rule."""
    smtp = payload.smtp
    if smtp is None:
        return None
    moved = _smtp_endpoint(ctx, account) != (smtp.host, smtp.port, smtp.security, smtp.username)
    if moved and payload.secret is None and payload.smtp_secret is None:
        return _secret_required()
    return check_host(ctx, smtp.host, smtp.port)


def _endpoint(ctx: Context, account: MailAccount) -> tuple[Any, Any, str | None]:
    imap, owner = account.imap, (account.tenant_id, str(account.id))
    return imap.get("host"), imap.get("port"), reveal(ctx, imap.get("username"), *owner)


def _secret_required() -> Result:
    return Result.fail(
        "secret_required",
        422,
        "changing host, port, security or username needs the secret again",
    )


def handle(payload: Payload, user: User, ctx: Context) -> Result:  # noqa: C901
    given = payload.model_fields_set - {"account_id", "reason"}
    if not given:
        return invalid_payload(
            [
                {
                    "path": "(payload)",
                    "message": "nothing to update: give displayName, imap, "
                    "secret, refreshToken, trustedAuthservId, folders, smtp or smtpSecret",
                }
            ]
        )

    def attempt() -> Result:  # noqa: C901, PLR0911, PLR0912
        account = load_managed(ctx, user, payload.account_id)
        if isinstance(account, Result):
            return account
        if payload.imap is not None:
            new = (payload.imap.host, payload.imap.port, payload.imap.username)
            repointed = (
                _endpoint(ctx, account) != new
                or account.imap.get("security") != payload.imap.security
            )
            if repointed and payload.secret is None:
                return _secret_required()
            if refused := check_destination(ctx, payload.imap):
                return refused
        if refused := _smtp_refused(ctx, account, payload):
            return refused
        tenant, account_id = account.tenant_id, str(account.id)
        seal = ctx.mail.cipher.seal
        changes: dict[str, Any] = {}
        moved = payload.imap is not None and _endpoint(ctx, account) != (
            payload.imap.host,
            payload.imap.port,
            payload.imap.username,
        )
        if payload.display_name is not None:
            changes["display_name"] = seal(tenant, account_id, payload.display_name)
        if payload.imap is not None:
            changes["imap"] = {
                **payload.imap.model_dump(),
                "username": seal(tenant, account_id, payload.imap.username),
            }
        if payload.smtp is not None:
            changes["smtp"] = payload.smtp.sealed(ctx, tenant, account_id)
        if payload.folders is not None and payload.folders != account.folders:
            changes["folders"] = payload.folders
        if "trusted_authserv_id" in payload.model_fields_set:
            changes["trusted_authserv_id"] = payload.trusted_authserv_id
        if payload.secret is not None or payload.refresh_token is not None:
            changes["secret_rotated"] = True
        if payload.smtp_secret is not None:
            changes["smtp_secret_rotated"] = True
        try:
            account.update(changes=changes, reason=payload.reason, now=ctx.clock.now())
        except AccountDisconnected:
            return Result.fail(
                "account_disconnected", 422, "reconnect the account before updating it"
            )
        if payload.secret is not None:
            ctx.mail.secrets.put(tenant, account_id, payload.secret.get_secret_value())
        if payload.smtp_secret is not None and ctx.mail.smtp_secrets is not None:
            smtp_secret = payload.smtp_secret.get_secret_value()
            ctx.mail.smtp_secrets.put(tenant, account_id, smtp_secret)
        if payload.refresh_token is not None:
            token = payload.refresh_token.get_secret_value()
            if refused := store_new_refresh_token(ctx, account, token):
                return refused
        commit(ctx.store, account)
        if moved:  # another mailbox: the old cursors mean nothing there
            ctx.mail.state.save_cursor(account_id, None)
            if ctx.mail.folders is not None:
                ctx.mail.folders.forget(account_id)
        ctx.mail.signals.publish(Signal("account_changed", tenant, account_id=account_id))
        return Result.ok({"accountId": account_id})

    return retrying(attempt)
