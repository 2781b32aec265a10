"""connect-mail-account: a tenant connects an IMAP mailbox (optionally verifying login).

Host, username and secret go into IMAP commands: CR, LF and NUL in them would inject
commands, so they are refused (400). The host must not resolve to an internal address
(422 ``host_not_allowed``), checked before any connection is made.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr, StringConstraints, model_validator

from application.context import Context
from application.destinations import ALLOW_SETTING, HostNotAllowed, HostUnresolved
from application.mail.folders import (
    MAX_NAME_CHARS,
    MAX_SELECTED_NAMES,
    FolderSettingInvalid,
    folder_setting_value,
    parse_folder_setting,
)
from application.mail.oauth import PRESETS, OAuthGrant
from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxAuthError,
    MailProviderError,
    OpenOptions,
)
from application.mail.sync_outcome import error_kind
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


class SmtpSettings(Base):
    """Where the account sends: its SMTP submission server (implicit TLS or STARTTLS),
    logged in to with the account's secret."""

    host: Host
    port: Annotated[int, Field(ge=1, le=65535)]
    security: Literal["tls", "starttls"]
    username: Username

    def sealed(self, ctx: Context, tenant: str, account_id: str) -> dict[str, object]:
        return {
            "host": self.host,
            "port": self.port,
            "security": self.security,
            "username": ctx.mail.cipher.seal(tenant, account_id, self.username),
        }


Scope = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


def _folder_setting(value: str | list[str]) -> str | list[str]:
    try:
        return folder_setting_value(parse_folder_setting(value))
    except FolderSettingInvalid as error:
        raise ValueError(str(error)) from None


FolderName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
FolderSetting = Annotated[
    Literal["special", "all"]
    | Annotated[list[FolderName], Field(min_length=1, max_length=MAX_SELECTED_NAMES)],
    AfterValidator(_folder_setting),
]
"""Which folders are synced: ``special`` (INBOX and the special-use folders), ``all``, or
a list of names (INBOX always), each without control characters."""


def _token_url(value: str) -> str:
    url = urlsplit(value)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise ValueError("an http(s) URL with a host")
    if url.username is not None or url.password is not None or url.fragment:
        raise ValueError("no user info and no fragment")
    url.port  # noqa: B018 - raises ValueError for a bad port
    return value


class OAuthSettings(Base):
    """The OAuth2 grant of an ``xoauth2`` account. The client secret is the tenant's own
    (sealed with the grant) or, when none is given, the operator's from settings, which
    is sent only to the token URL the operator configured with it."""

    provider: Literal["google", "microsoft", "custom"]
    refresh_token: Secret
    client_id: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    client_secret: Secret | None = None
    token_url: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=2048),
            AfterValidator(_no_line_breaks),
            AfterValidator(_token_url),
        ]
        | None
    ) = None
    scopes: Annotated[list[Scope], Field(max_length=32)] | None = None

    @model_validator(mode="after")
    def _token_url_for_custom(self) -> OAuthSettings:
        if (self.provider == "custom") != (self.token_url is not None):
            raise ValueError("tokenUrl is required for provider custom and only there")
        return self

    def grant(self, tenant_id: str) -> OAuthGrant:
        return OAuthGrant(
            tenant_id=tenant_id,
            provider=self.provider,
            refresh_token=self.refresh_token.get_secret_value(),
            client_id=self.client_id,
            token_url=self.token_url,
            scopes=tuple(self.scopes) if self.scopes else PRESETS[self.provider].scopes,
            client_secret=self.client_secret.get_secret_value() if self.client_secret else None,
        )


class Payload(Base):
    provider: Literal["imap"]
    display_name: Annotated[str, StringConstraints(max_length=200)]
    address: Annotated[str, StringConstraints(pattern=ADDRESS, max_length=320)]
    scope: Literal["shared", "user"]
    auth_method: Literal["password", "xoauth2"]
    imap: ImapSettings
    secret: Secret | None = None
    oauth: OAuthSettings | None = None
    verify: bool = False
    trusted_authserv_id: Annotated[str, StringConstraints(max_length=255)] | None = None
    folders: FolderSetting | None = None
    smtp: SmtpSettings | None = None
    smtp_secret: Secret | None = None  # for SMTP instead of ``secret`` (password accounts)

    @model_validator(mode="after")
    def _credentials(self) -> Payload:
        if self.smtp_secret is not None and self.smtp is None:
            raise ValueError("smtpSecret is for an account with smtp settings")
        if self.oauth is not None and self.auth_method != "xoauth2":
            raise ValueError("oauth is for authMethod xoauth2")
        if (self.secret is None) == (self.oauth is None):
            raise ValueError("give a secret or (for xoauth2) an oauth grant")
        return self


def check_destination(ctx: Context, imap: ImapSettings) -> Result | None:
    """``host_not_allowed`` for an internal host, and the same answer for a host that
    does not resolve now: two answers would tell a tenant which internal names exist.
    Every connection checks again."""
    return check_host(ctx, imap.host, imap.port)


def check_token_url(ctx: Context, oauth: OAuthSettings | None) -> Result | None:
    """The token URL obeys the same rule as the IMAP host, checked again at each refresh."""
    if oauth is None or oauth.token_url is None:
        return None
    url = urlsplit(oauth.token_url)
    return check_host(ctx, url.hostname or "", url.port or (80 if url.scheme == "http" else 443))


def check_host(ctx: Context, host: str, port: int) -> Result | None:
    try:
        ctx.mail.destinations.check(host, port)
    except HostNotAllowed as error:
        return host_not_allowed(error)
    except HostUnresolved:
        return host_not_allowed(HostNotAllowed(host))
    return None


def verify_login(
    ctx: Context, account_id: str, endpoint: ImapEndpoint, credentials: Credentials
) -> Result | None:
    deadline = time.monotonic() + ctx.policy.verify_timeout
    try:
        with ctx.mail.provider.open(
            endpoint, credentials, OpenOptions(account_id, deadline=deadline)
        ) as session:
            session.verify()
    except MailboxAuthError:
        return Result.fail("mailbox_auth_failed", 422, "the mailbox refused the credentials")
    except HostNotAllowed as error:  # the host's DNS answer changed since the check
        return host_not_allowed(error)
    except HostUnresolved:  # the same answer as an internal host (see check_destination)
        return host_not_allowed(HostNotAllowed(endpoint.host))
    except MailProviderError as error:
        return Result.fail(
            "mailbox_unreachable",
            422,
            "the mailbox could not be reached",
            errorKind=error_kind(error),
        )
    return None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    allowed = {TENANT_ADMIN} if payload.scope == "shared" else {TENANT_ADMIN, TENANT_MEMBER}
    if not user.has_any(allowed):
        return forbidden()
    refused = (
        check_destination(ctx, payload.imap)
        or check_token_url(ctx, payload.oauth)
        or (check_host(ctx, payload.smtp.host, payload.smtp.port) if payload.smtp else None)
    )
    if refused:
        return refused
    account_id = str(uuid.uuid4())
    tenant = user.tenant_id
    if payload.oauth is not None:
        secret = payload.oauth.grant(tenant).dumps()
    else:
        assert payload.secret is not None
        secret = payload.secret.get_secret_value()
    committed = False
    try:
        result = _connect(payload, user, ctx, account_id, secret)
        committed = result.is_success
    finally:
        if not committed:  # a refused verify, or a crash: no grant outlives its account
            ctx.mail.secrets.delete(account_id)
            if ctx.mail.smtp_secrets is not None:
                ctx.mail.smtp_secrets.delete(account_id)
    if committed:
        ctx.mail.signals.publish(Signal("account_changed", tenant, account_id=account_id))
    return result


def _connect(payload: Payload, user: User, ctx: Context, account_id: str, secret: str) -> Result:
    tenant = user.tenant_id
    if payload.verify:
        endpoint = ImapEndpoint(
            payload.imap.host, payload.imap.port, payload.imap.security, payload.imap.username
        )
        if payload.auth_method == "xoauth2":  # tokens come from the store (a refresh rotates)
            ctx.mail.secrets.put(tenant, account_id, secret)
        failed = verify_login(ctx, account_id, endpoint, Credentials(payload.auth_method, secret))
        if failed:
            return failed
        if payload.oauth is not None:
            secret = ctx.mail.secrets.get(account_id) or secret
    seal = ctx.mail.cipher.seal
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
    if payload.folders is not None and payload.folders != "special":
        account.update(changes={"folders": payload.folders}, reason=None, now=ctx.clock.now())
    if payload.smtp is not None:
        smtp = payload.smtp.sealed(ctx, tenant, account_id)
        account.update(changes={"smtp": smtp}, reason=None, now=ctx.clock.now())
    ctx.mail.secrets.put(tenant, account_id, secret)
    if payload.smtp_secret is not None and ctx.mail.smtp_secrets is not None:
        ctx.mail.smtp_secrets.put(tenant, account_id, payload.smtp_secret.get_secret_value())
    commit(ctx.store, account)
    return Result.ok({"accountId": account_id})


def store_new_refresh_token(
    ctx: Context, account: MailAccount, refresh_token: str
) -> Result | None:
    """Replace the refresh token of an account's stored OAuth2 grant (the old access
    token goes with the old grant); 422 ``not_oauth`` for an account without a grant."""
    account_id = str(account.id)
    stored = ctx.mail.secrets.get(account_id)
    grant = OAuthGrant.loads(stored) if stored is not None else None
    if account.auth_method != "xoauth2" or grant is None:
        return Result.fail("not_oauth", 422, "the account has no OAuth2 grant to renew")
    ctx.mail.secrets.put(
        account.tenant_id, account_id, grant.with_refresh_token(refresh_token).dumps()
    )
    return None


def host_not_allowed(error: HostNotAllowed) -> Result:
    return Result.fail(
        "host_not_allowed",
        422,
        f"the IMAP host does not resolve to a public address; set {ALLOW_SETTING}=true"
        " to allow private ones",
        host=error.host,
        setting=ALLOW_SETTING,
    )
