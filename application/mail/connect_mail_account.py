"""connect-mail-account: a tenant connects an IMAP mailbox (optionally verifying login).

Host, username and secret go into IMAP commands: CR, LF and NUL in them would inject
commands, so they are refused (400). The host must not resolve to an internal address
(422 ``host_not_allowed``), checked before any connection is made.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, StringConstraints

from application.context import Context
from application.mail.destinations import HostNotAllowed, HostUnresolved, host_not_allowed
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

ADDRESS = r"^[^@\s]+@[^@\s]+$"
LINE_BREAKS = frozenset("\r\n\x00")


def _no_line_breaks(value: str) -> str:
    if not LINE_BREAKS.isdisjoint(value):
        raise ValueError("CR, LF and NUL are not allowed")
    return value


def _secret_no_line_breaks(value: SecretStr) -> SecretStr:
    _no_line_breaks(value.get_secret_value())
    return value


def _hostname(value: str) -> str:
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError("a host name has no spaces or control characters")
    return value


Username = Annotated[
    str, StringConstraints(min_length=1, max_length=320), AfterValidator(_no_line_breaks)
]
Host = Annotated[str, StringConstraints(min_length=1, max_length=255), AfterValidator(_hostname)]
Secret = Annotated[
    SecretStr, Field(min_length=1, max_length=8192), AfterValidator(_secret_no_line_breaks)
]


class ImapSettings(Base):
    host: Host
    port: Annotated[int, Field(ge=1, le=65535)]
    security: Literal["tls", "starttls", "none"]
    username: Username


class Payload(Base):
    provider: Literal["imap"]
    display_name: Annotated[str, StringConstraints(max_length=200)]
    address: Annotated[str, StringConstraints(pattern=ADDRESS, max_length=320)]
    scope: Literal["shared", "user"]
    auth_method: Literal["password", "xoauth2"]
    imap: ImapSettings
    secret: Secret
    verify: bool = False
    trusted_authserv_id: Annotated[str, StringConstraints(max_length=255)] | None = None


def check_destination(ctx: Context, imap: ImapSettings) -> Result | None:
    """``host_not_allowed`` for an internal host. A host that does not resolve now is
    let through: nothing can be reached there, and every connection checks again."""
    try:
        ctx.mail.destinations.check(imap.host, imap.port)
    except HostNotAllowed as error:
        return host_not_allowed(error)
    except HostUnresolved:
        return None
    return None


def verify_login(
    ctx: Context, account_id: str, endpoint: ImapEndpoint, credentials: Credentials
) -> Result | None:
    try:
        with ctx.mail.provider.open(endpoint, credentials, account_id=account_id) as session:
            session.verify()
    except MailboxAuthError:
        return Result.fail("mailbox_auth_failed", 422, "the mailbox refused the credentials")
    except HostNotAllowed as error:  # the host's DNS answer changed since the check
        return host_not_allowed(error)
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
    refused = check_destination(ctx, payload.imap)
    if refused:
        return refused
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
