"""OAuth2 access tokens for ``xoauth2`` accounts: refreshed before they expire, by one
process at a time per account across the fleet, with a rotated refresh token sealed in
the secret store before the new access token is used.

The account's grant (refresh token, client, token URL, scopes, the current access
token and its expiry) is one sealed secret (``OAuthGrant.dumps``), never in an event
or a log line. ``OAuthTokens.get_access_token``:

1. reads the grant; a token valid for more than ``margin`` seconds is returned as is;
2. otherwise takes the account's refresh lock (a ``LeaseBackend``: Redis across the
   fleet, in-process without Redis), waiting while another holder refreshes;
3. holding it, reads the grant again: a holder that finished meanwhile left a fresh
   token, which is reused (single-flight: one refresh request per expiry);
4. else asks the token server, stores the new grant (the rotated refresh token with
   the new access token) and only then returns the new access token.

Whose client credentials go to which token URL: a grant that carries its own client
secret (a tenant's own ``custom`` provider, sealed with the grant) sends its own; the
operator's ``TIDINGS_OAUTH_<PROVIDER>_CLIENT_SECRET`` goes only to the token URL the
operator configured with it (the preset's for ``google`` and ``microsoft``,
``TIDINGS_OAUTH_CUSTOM_TOKEN_URL`` for ``custom``), never to a URL a tenant named.

Classification of a refresh that fails: ``invalid_grant`` (the grant was revoked or
expired) raises ``MailboxReauthRequired``; a token request past its deadline raises
``MailboxTimeout`` (error kind ``timeout``); everything else — network errors, timeouts,
5xx, 429, an unparsable answer, another OAuth error code, a lock that stays taken —
raises ``MailboxTransientError``: the account stays active and the next tick tries
again. See docs/decisions/oauth-single-flight.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from application.errors import ApplicationError
from application.leases import LeaseBackend, LeaseBackendUnavailable
from application.mail.ports import (
    MailboxAuthError,
    MailboxReauthRequired,
    MailboxTimeout,
    MailboxTransientError,
)
from application.privacy import SecretStore

log = logging.getLogger("tidings.oauth")

GRANT_PREFIX = "oauth2:"
OAuthProviderName = Literal["google", "microsoft", "custom"]


@dataclass(frozen=True)
class ProviderPreset:
    token_url: str | None
    scopes: tuple[str, ...]


PRESETS: dict[str, ProviderPreset] = {
    "google": ProviderPreset("https://oauth2.googleapis.com/token", ("https://mail.google.com/",)),
    "microsoft": ProviderPreset(
        "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        ("https://outlook.office.com/IMAP.AccessAsUser.All", "offline_access"),
    ),
    "custom": ProviderPreset(None, ()),
}


@dataclass(frozen=True)
class OAuthClient:
    """A provider's client credentials from settings (``TIDINGS_OAUTH_<PROVIDER>_*``);
    the secret is sent to ``token_url`` only (None: the provider's preset URL)."""

    client_id: str | None = None
    client_secret: str | None = None
    token_url: str | None = None

    def __repr__(self) -> str:
        return f"OAuthClient(client_id={self.client_id!r}, client_secret=<redacted>)"


@dataclass(frozen=True)
class OAuthGrant:
    tenant_id: str
    provider: str
    refresh_token: str
    client_id: str | None = None
    token_url: str | None = None
    scopes: tuple[str, ...] = ()
    access_token: str | None = None
    client_secret: str | None = None  # the tenant's own client (sealed with the grant)
    expires_at: float | None = None  # epoch seconds

    def __repr__(self) -> str:
        return f"OAuthGrant(provider={self.provider!r}, tokens=<redacted>)"

    def dumps(self) -> str:
        body = {
            "tenantId": self.tenant_id,
            "provider": self.provider,
            "refreshToken": self.refresh_token,
            "clientId": self.client_id,
            "tokenUrl": self.token_url,
            "scopes": list(self.scopes),
            "accessToken": self.access_token,
            "expiresAt": self.expires_at,
        }
        if self.client_secret is not None:
            body["clientSecret"] = self.client_secret
        return GRANT_PREFIX + json.dumps(body, separators=(",", ":"))

    @classmethod
    def loads(cls, secret: str) -> OAuthGrant | None:
        """The grant a stored secret holds; None for a plain secret (a password, or an
        access token given directly)."""
        if not secret.startswith(GRANT_PREFIX):
            return None
        body: dict[str, Any] = json.loads(secret[len(GRANT_PREFIX) :])
        expires = body.get("expiresAt")
        return cls(
            tenant_id=str(body["tenantId"]),
            provider=str(body["provider"]),
            refresh_token=str(body["refreshToken"]),
            client_id=body.get("clientId"),
            token_url=body.get("tokenUrl"),
            scopes=tuple(body.get("scopes") or ()),
            access_token=body.get("accessToken"),
            expires_at=float(expires) if expires is not None else None,
            client_secret=body.get("clientSecret"),
        )

    def with_refresh_token(self, refresh_token: str) -> OAuthGrant:
        """A new grant from the user: the old access token goes with the old grant."""
        return replace(self, refresh_token=refresh_token, access_token=None, expires_at=None)


def is_grant(secret: str) -> bool:
    return secret.startswith(GRANT_PREFIX)


@dataclass(frozen=True)
class TokenAnswer:
    access_token: str
    expires_in: float
    refresh_token: str | None = None  # set when the server rotated it

    def __repr__(self) -> str:
        return (
            f"TokenAnswer(expires_in={self.expires_in}, rotated={self.refresh_token is not None})"
        )


class TokenRefusedGrant(ApplicationError):
    """The token server answered ``invalid_grant``: the refresh token is dead."""


class TokenServerError(ApplicationError):
    """Anything else that kept a refresh from succeeding: transient."""


class TokenTimeout(TokenServerError):
    """The token request passed its wall-clock deadline."""


class TokenClient(Protocol):
    def refresh(
        self,
        token_url: str,
        *,
        refresh_token: str,
        client_id: str | None,
        client_secret: str | None,
        scopes: tuple[str, ...],
    ) -> TokenAnswer:
        """POST a ``refresh_token`` grant; raise ``TokenRefusedGrant`` on ``invalid_grant``,
        ``TokenServerError`` on anything else that is not a valid token answer."""
        ...


class OAuthTokens:
    """Implements ``TokenProvider`` over the secret store, a token client and a lock."""

    def __init__(
        self,
        secrets: SecretStore,
        client: TokenClient,
        lock: LeaseBackend,
        clients: Mapping[str, OAuthClient] | None = None,
        *,
        margin: float = 120.0,
        lock_wait: float = 30.0,
        clock: Callable[[], float] = time.time,
        on_refresh: Callable[[], None] = lambda: None,
    ) -> None:
        self._secrets = secrets
        self._client = client
        self._lock = lock
        self._clients = dict(clients or {})
        self._margin = margin
        self._lock_wait = lock_wait
        self._clock = clock
        self._on_refresh = on_refresh

    def get_access_token(self, account_id: str, *, refused: str | None = None) -> str:
        """``refused``: a token the IMAP server refused although it looked valid; it is
        refreshed unless another holder has replaced it meanwhile. A stored secret that
        is no grant (an access token given directly) is returned as it is."""
        secret = self._secrets.get(account_id)
        if secret is None:
            raise MailboxAuthError("no usable secret for the account")
        if OAuthGrant.loads(secret) is None:
            return secret
        grant = self._grant(account_id)
        if self._fresh(grant, refused):
            assert grant.access_token is not None
            return grant.access_token
        token = self._take_lock(account_id)
        try:
            grant = self._grant(account_id)  # a holder before us may have refreshed
            if self._fresh(grant, refused):
                assert grant.access_token is not None
                return grant.access_token
            return self._refresh(account_id, grant)
        finally:
            try:
                self._lock.release(account_id, token)
            except LeaseBackendUnavailable:
                log.warning("oauth.lock_release_failed account_id=%s", account_id)

    # -- steps -------------------------------------------------------------

    def _grant(self, account_id: str) -> OAuthGrant:
        secret = self._secrets.get(account_id)
        grant = OAuthGrant.loads(secret) if secret is not None else None
        if grant is None:
            raise MailboxAuthError("the account has no OAuth2 grant")
        return grant

    def _fresh(self, grant: OAuthGrant, refused: str | None = None) -> bool:
        return (
            grant.access_token is not None
            and grant.access_token != refused
            and grant.expires_at is not None
            and grant.expires_at - self._margin > self._clock()
        )

    def _take_lock(self, account_id: str) -> str:
        give_up = time.monotonic() + self._lock_wait
        pause = 0.02
        while True:
            try:
                token = self._lock.acquire(account_id)
            except LeaseBackendUnavailable:
                raise MailboxTransientError("the refresh lock is unavailable") from None
            if token is not None:
                return token
            if time.monotonic() >= give_up:
                raise MailboxTransientError("another refresh of the account is still running")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    def _refresh(self, account_id: str, grant: OAuthGrant) -> str:
        preset = PRESETS.get(grant.provider, PRESETS["custom"])
        token_url = grant.token_url if grant.provider == "custom" else preset.token_url
        if not token_url:
            raise MailboxAuthError("the account's grant names no token URL")
        client_id, client_secret = self._credentials(grant, token_url)
        self._on_refresh()
        try:
            answer = self._client.refresh(
                token_url,
                refresh_token=grant.refresh_token,
                client_id=client_id,
                client_secret=client_secret,
                scopes=grant.scopes or preset.scopes,
            )
        except TokenRefusedGrant:
            log.warning("oauth.refresh_refused account_id=%s", account_id)
            raise MailboxReauthRequired("the token server refused the refresh token") from None
        except TokenTimeout:
            log.warning("oauth.refresh_timeout account_id=%s", account_id)
            raise MailboxTimeout("the token refresh passed its deadline") from None
        except TokenServerError as error:
            log.warning("oauth.refresh_failed account_id=%s error=%s", account_id, error)
            raise MailboxTransientError("the token refresh failed") from None
        renewed = replace(
            grant,
            refresh_token=answer.refresh_token or grant.refresh_token,
            access_token=answer.access_token,
            expires_at=self._clock() + answer.expires_in,
        )
        # Sealed before use: were it used first and the store then failed, the rotated
        # refresh token would be lost and the old one is already dead.
        self._secrets.put(grant.tenant_id, account_id, renewed.dumps())
        log.info(
            "oauth.refreshed account_id=%s rotated=%s",
            account_id,
            answer.refresh_token is not None,
        )
        return answer.access_token

    def _credentials(self, grant: OAuthGrant, token_url: str) -> tuple[str | None, str | None]:
        """The grant's own client when it carries a secret; else the operator's, whose
        secret goes only to the token URL configured with it."""
        if grant.client_secret is not None:
            return grant.client_id, grant.client_secret
        client = self._clients.get(grant.provider, OAuthClient())
        configured = client.token_url or PRESETS.get(grant.provider, PRESETS["custom"]).token_url
        secret = client.client_secret if configured and token_url == configured else None
        return grant.client_id or client.client_id, secret
