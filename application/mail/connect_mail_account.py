"""connect-mail-account: a tenant connects an IMAP mailbox (optionally verifying login)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import Field, SecretStr, StringConstraints

from application.context import Context
from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxAuthError,
    MailProviderError,
)
from application.payloads import Payload as Base
from application.result import Result, forbidden
from application.signals import Signal
from application.streams import commit
from application.users import TENANT_ADMIN, TENANT_MEMBER, User
from domain.mail_account import MailAccount

NAME = "connect-mail-account"

Text = Annotated[str, StringConstraints(min_length=1, max_length=320)]
ADDRESS = r"^[^@\s]+@[^@\s]+$"


class ImapSettings(Base):
    host: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    port: Annotated[int, Field(ge=1, le=65535)]
    security: Literal["tls", "starttls", "none"]
    username: Text


class Payload(Base):
    provider: Literal["imap"]
    display_name: Annotated[str, StringConstraints(max_length=200)]
    address: Annotated[str, StringConstraints(pattern=ADDRESS, max_length=320)]
    scope: Literal["shared", "user"]
    auth_method: Literal["password", "xoauth2"]
    imap: ImapSettings
    secret: Annotated[SecretStr, Field(min_length=1, max_length=8192)]
    verify: bool = False
    trusted_authserv_id: Annotated[str, StringConstraints(max_length=255)] | None = None


def verify_login(
    ctx: Context, account_id: str, endpoint: ImapEndpoint, credentials: Credentials
) -> Result | None:
    try:
        with ctx.mail.provider.open(endpoint, credentials, account_id=account_id) as session:
            session.verify()
    except MailboxAuthError:
        return Result.fail("mailbox_auth_failed", 422, "the mailbox refused the credentials")
    except MailProviderError as error:
        return Result.fail(
            "mailbox_unreachable",
            422,
            "the mailbox could not be reached",
            errorKind=type(error).__name__,
        )
    return None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    allowed = {TENANT_ADMIN} if payload.scope == "shared" else {TENANT_ADMIN, TENANT_MEMBER}
    if not user.has_any(allowed):
        return forbidden()
    account_id = str(uuid.uuid4())
    secret = payload.secret.get_secret_value()
    if payload.verify:
        endpoint = ImapEndpoint(
            payload.imap.host, payload.imap.port, payload.imap.security, payload.imap.username
        )
        failed = verify_login(ctx, account_id, endpoint, Credentials(payload.auth_method, secret))
        if failed:
            return failed
    seal = ctx.mail.cipher.seal
    tenant = user.tenant_id
    account = MailAccount(uuid.UUID(account_id))
    account.connect(
        now=ctx.clock.now(),
        tenant_id=tenant,
        owner_user_id=user.id if payload.scope == "user" else None,
        scope=payload.scope,
        provider=payload.provider,
        auth_method=payload.auth_method,
        display_name=seal(tenant, account_id, payload.display_name),
        address=seal(tenant, account_id, payload.address),
        imap={
            "host": payload.imap.host,
            "port": payload.imap.port,
            "security": payload.imap.security,
            "username": seal(tenant, account_id, payload.imap.username),
        },
        trusted_authserv_id=payload.trusted_authserv_id,
    )
    ctx.mail.secrets.put(tenant, account_id, secret)
    commit(ctx.store, account)
    ctx.mail.signals.publish(Signal("account_changed", tenant, account_id=account_id))
    return Result.ok({"accountId": account_id})
