"""``ImapMailProvider``: connect, check capabilities, log in; hand out sessions.

Connecting: TCP (or TLS) with a connect timeout, then a read timeout on the
socket for its whole life. Connecting (with the greeting and STARTTLS), logging in and
every later command each run under a total deadline (``operation_timeout``) enforced
where bytes are read (``wire``); a caller's ``deadline`` caps them all, so a poll's
deadline frees its thread whatever the server does. ``starttls`` requires STARTTLS to be offered and
never falls back to cleartext. Capabilities are checked before the round trip
that needs them: IMAP4rev1, STARTTLS, AUTH=XOAUTH2 for tokens, LOGINDISABLED
(then AUTH=PLAIN is used). After login, CONDSTORE is ENABLEd where offered so
that SELECT reports HIGHESTMODSEQ.

OAuth2 (``xoauth2``): SASL OAUTHBEARER where the server offers it, else XOAUTH2. The
access token comes from the ``TokenProvider`` when one is wired (it refreshes a stored
grant, and returns a stored plain token as it is), else ``Credentials.secret`` is taken
as the token itself. A grant's token that the server refuses is refreshed once and
tried again.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

from imapclient.exceptions import IMAPClientAbortError, IMAPClientError
from imapclient.util import to_unicode

from application.mail.oauth import is_grant
from application.mail.ports import (
    BlobStore,
    Credentials,
    DownloadBudgets,
    ImapEndpoint,
    MailboxAuthError,
    MailboxUnreachable,
    MailProviderError,
    OpenOptions,
    TokenProvider,
)
from infrastructure.imap.errors import Phase, classify
from infrastructure.imap.logs import install_redaction
from infrastructure.imap.session import ImapMailboxSession
from infrastructure.imap.settings import ImapAdapterSettings
from infrastructure.imap.wire import (
    DeadlineContext,
    Limits,
    Wire,
    WireClient,
    quiet,
    shared_capabilities,
    shed_start_up_state,
)

log = logging.getLogger("tidings.imap")
T = TypeVar("T")


class ImapMailProvider:
    def __init__(
        self,
        *,
        blob_store: BlobStore,
        token_provider: TokenProvider | None = None,
        settings: ImapAdapterSettings | None = None,
        budgets: DownloadBudgets | None = None,
    ) -> None:
        self._budgets = budgets  # the daily download budget of accounts whose provider has one
        self._blobs = blob_store
        self._tokens = token_provider
        self._settings = settings or ImapAdapterSettings()
        install_redaction()

    def open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> ImapMailboxSession:
        account_id = options.account_id
        if credentials.method != "xoauth2" or (
            self._tokens is None and not is_grant(credentials.secret)
        ):
            return self._open(endpoint, credentials, options)
        # Before connecting: a refresh (or a wait for another's) holds no connection.
        if self._tokens is None:
            raise MailboxAuthError("no token provider is wired for an OAuth2 grant")
        token = self._tokens.get_access_token(account_id)
        try:
            return self._open(endpoint, Credentials("xoauth2", token), options)
        except MailboxAuthError:
            if not is_grant(credentials.secret):
                raise
            # The server refused a token we took for valid (revoked early, clock skew):
            # one refresh, then one more try; a refused fresh token is an auth error.
            fresh = self._tokens.get_access_token(account_id, refused=token)
            if fresh == token:
                raise
            return self._open(endpoint, Credentials("xoauth2", fresh), options)

    def _open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> ImapMailboxSession:
        s = self._settings
        account_id = options.account_id
        wire = Wire(
            Limits(literal_bytes=s.literal_cap_bytes, response_bytes=s.response_cap_bytes),
            session_expires=options.deadline,
        )
        client = self._call(wire, account_id, "connect", self._connect, endpoint, wire)
        try:
            self._call(
                wire, account_id, "login", self._login, client, endpoint, credentials, account_id
            )
            caps = self._call(wire, account_id, "command", _capabilities, client)
            qresync = False
            if "CONDSTORE" in caps and "ENABLE" in caps:
                want = ["CONDSTORE"]
                if options.qresync and "QRESYNC" in caps:
                    want.append("QRESYNC")
                enabled = self._call(wire, account_id, "command", _enable, client, want)
                qresync = "QRESYNC" in enabled
        except BaseException:
            _shutdown(client)
            raise
        shed_start_up_state(client)
        log.debug("imap.login account_id=%s", account_id)
        return ImapMailboxSession(
            client,
            caps,
            account_id=account_id,
            settings=self._settings,
            blob_store=self._blobs,
            blob_owner=options.blob_owner,
            wire=wire,
            meter=self._budgets.meter(account_id, endpoint.host) if self._budgets else None,
            qresync=qresync,
        )

    # -- steps -------------------------------------------------------------

    def _connect(self, endpoint: ImapEndpoint, wire: Wire) -> WireClient:
        s = self._settings
        context = None
        if endpoint.security != "none":
            context = DeadlineContext(s.ssl_context or ssl.create_default_context(), wire)
        client = WireClient(
            endpoint.host,
            port=endpoint.port,
            ssl=endpoint.security == "tls",
            ssl_context=context,
            timeout=s.connect_timeout,
            wire=wire,
            connect_to=endpoint.addresses,
        )
        try:
            client.normalise_times = False  # keep INTERNALDATE timezone-aware
            if s.quiet_imaplib:
                quiet(client)  # imapclient sets 5: repr() of every line and literal
            client.socket().settimeout(s.read_timeout)
            if endpoint.security == "starttls":
                if "STARTTLS" not in _capabilities(client):
                    raise MailboxUnreachable("server does not offer STARTTLS")
                client.starttls(context)
                client.socket().settimeout(s.read_timeout)
            caps = _capabilities(client)
            if not caps & {"IMAP4REV1", "IMAP4REV2"}:
                raise MailboxUnreachable("server is not IMAP4rev1")
        except BaseException:
            _shutdown(client)
            raise
        return client

    def _login(
        self,
        client: WireClient,
        endpoint: ImapEndpoint,
        credentials: Credentials,
        account_id: str,
    ) -> None:
        caps = _capabilities(client)
        if credentials.method == "xoauth2":
            mechanisms = caps & {"AUTH=OAUTHBEARER", "AUTH=XOAUTH2"}
            if not mechanisms:
                raise MailboxAuthError("server offers neither AUTH=OAUTHBEARER nor AUTH=XOAUTH2")
            token = credentials.secret
            if "AUTH=OAUTHBEARER" in mechanisms:
                client.oauthbearer_login(endpoint.username, token)
            else:
                client.oauth2_login(endpoint.username, token)
        elif "LOGINDISABLED" in caps:
            if "AUTH=PLAIN" not in caps:
                raise MailboxAuthError("server disables LOGIN and offers no AUTH=PLAIN")
            client.plain_login(endpoint.username, credentials.secret)
        else:
            client.login(endpoint.username, credentials.secret)

    def _call(
        self, wire: Wire, account_id: str, phase: Phase, fn: Callable[..., T], *args: Any
    ) -> T:
        try:
            with wire.operation(self._settings.operation_timeout):
                return fn(*args)
        except MailProviderError as exc:
            log.warning(
                "imap.error account_id=%s phase=%s error_class=%s",
                account_id,
                phase,
                type(exc).__name__,
            )
            raise
        except Exception as exc:
            err = classify(exc, phase=phase)
            log.warning(
                "imap.error account_id=%s phase=%s error_class=%s cause=%s",
                account_id,
                phase,
                type(err).__name__,
                type(exc).__name__,
            )
            raise err from None


def _enable(client: WireClient, capabilities: list[str]) -> frozenset[str]:
    """Best effort, one command: without CONDSTORE SELECT just reports no HIGHESTMODSEQ,
    without QRESYNC the poll reads flags and expunges by FETCH and SEARCH. What the
    server says it enabled."""
    try:
        enabled = client.enable(*capabilities)
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        log.info("imap.enable_refused capability=%s", "+".join(capabilities))
        return frozenset()
    return frozenset(to_unicode(c).upper() for c in enabled or ())


def _capabilities(client: WireClient) -> frozenset[str]:
    return shared_capabilities(frozenset(to_unicode(c).upper() for c in client.capabilities()))


def _shutdown(client: WireClient) -> None:
    with contextlib.suppress(Exception):  # best effort on a connection we abandon
        client.shutdown()
