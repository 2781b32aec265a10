"""``SmtpSubmitter``: the ``SmtpSubmission`` port on ``BoundedSMTP``.

A connection for an attempt, kept afterwards for the account's next message
(``KeptConnections``); one dropped while kept, or answering 421, is replaced by a new
connection before any of the message goes out (``_over_kept``). A new connection: to an
address the destination check approved (implicit TLS, or STARTTLS that must be offered:
never cleartext), EHLO, log in (PLAIN or LOGIN with the password; XOAUTH2 with an
access token from the ``TokenProvider``, the IMAP path's single-flight refresh, once
more after a refused token). Then MAIL, RCPT for each recipient, DATA. The server's
answers decide: 2xx sent; 4xx, a network failure or the deadline before the message
went out ``SmtpTransient``; 5xx ``SmtpRejected``; a failure after the whole message went
out ``SmtpOutcomeUnknown`` (the server may have taken it). Some recipients refused while
others were taken is a send, with the refusals in the reply. A caller's ``confirm`` is
asked after the message's bytes and before their end (``BoundedSMTP.before_end``): no,
and the transaction ends there, the connection closed (``SmtpAbandoned``).
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from application.mail.oauth import is_grant
from application.mail.outbound.ports import (
    SmtpAbandoned,
    SmtpEndpoint,
    SmtpError,
    SmtpOutcomeUnknown,
    SmtpRejected,
    SmtpReply,
    SmtpTimeout,
    SmtpTransient,
    Submission,
)
from application.mail.ports import Credentials, TokenProvider
from application.mail.providers import normalise_host
from infrastructure.smtp.client import BoundedSMTP, DeadlinePassed, EndWithheld, ReplyTooLarge
from infrastructure.smtp.kept import ConnectionKey, KeptConnections, connection_key

log = logging.getLogger("tidings.smtp")
MAX_REPLY_TEXT = 1000


def _reply(code: int, text: bytes | str) -> SmtpReply:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return SmtpReply(code, text[:MAX_REPLY_TEXT])


def _by_code(code: int, text: bytes | str, what: str) -> SmtpError:
    reply = _reply(code, text)
    if 400 <= code < 500:
        return SmtpTransient(what, reply)
    return SmtpRejected(what, reply)


class SmtpSubmitter:
    def __init__(
        self,
        *,
        token_provider: TokenProvider | None = None,
        ssl_context: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
        connections: KeptConnections | None = None,
    ) -> None:
        self._tokens = token_provider
        self._context = ssl_context
        self._local_hostname = local_hostname
        self.connections = (
            connections if connections is not None else KeptConnections(lambda _h: 4, max_kept=0)
        )

    def _tls(self) -> ssl.SSLContext:
        return self._context or ssl.create_default_context()

    def send(
        self,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        submission: Submission,
        *,
        account_id: str,
        deadline: float,
        confirm: Callable[[], bool] | None = None,
    ) -> SmtpReply:
        key = connection_key(account_id, endpoint, credentials)
        host = normalise_host(endpoint.host)
        transaction = Transaction(submission, confirm)
        kept = self.connections.take(key)
        if kept is not None:
            reply = self._over_kept(kept, key, host, transaction, deadline)
            if reply is not None:
                return reply
        token = self._token(credentials, account_id)
        try:
            return self._attempt(key, endpoint, credentials, token, transaction, deadline)
        except SmtpRejected as refused:
            if token is None or not is_grant(credentials.secret) or self._tokens is None:
                raise
            if refused.reply is None or refused.reply.code not in (334, 535):
                raise
            # A token we took for valid was refused: one refresh, one more try.
            fresh = self._tokens.get_access_token(account_id, refused=token)
            if fresh == token:
                raise
            return self._attempt(key, endpoint, credentials, fresh, transaction, deadline)

    def close_idle(self) -> int:
        return self.connections.close_idle()

    def close(self) -> None:
        self.connections.close_all()

    def _token(self, credentials: Credentials, account_id: str) -> str | None:
        if credentials.method != "xoauth2":
            return None
        if self._tokens is None:
            return credentials.secret
        return self._tokens.get_access_token(account_id)

    def _over_kept(
        self,
        client: BoundedSMTP,
        key: ConnectionKey,
        host: str,
        transaction: Transaction,
        deadline: float,
    ) -> SmtpReply | None:
        """The next message over a kept connection; None: the connection was dropped
        while kept (a network error, or a 421, before any of the message went out), so
        the caller connects anew.

        No RSET first: after the ``250`` that ended the last transaction the server has
        cleared its state (RFC 5321 4.1.1.4), and a dropped connection shows at MAIL FROM
        as it would at RSET, before DATA; a round trip a message saved."""
        try:
            client.rearm(deadline)
            reply = self._transaction(client, transaction)
        except BaseException as error:
            self.connections.discard(host, client)
            if not client.message_sent and _dropped(error):
                log.info("smtp.kept_connection_dropped error=%s", type(error).__name__)
                return None
            if isinstance(error, OSError | smtplib.SMTPException):
                raise _classified(error, client) from None
            raise
        self.connections.keep(key, host, client)
        return reply

    def _attempt(  # noqa: PLR0917 - the transaction's parts, passed on as they are
        self,
        key: ConnectionKey,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        token: str | None,
        transaction: Transaction,
        deadline: float,
    ) -> SmtpReply:
        host = normalise_host(endpoint.host)
        if not self.connections.acquire(host, deadline):
            raise SmtpTimeout("no free connection slot for the host before the deadline")
        try:
            client = BoundedSMTP(
                endpoint.host,
                deadline=deadline,
                addresses=endpoint.addresses,
                implicit_tls=self._tls() if endpoint.security == "tls" else None,
                local_hostname=self._local_hostname,
            )
        except BaseException as error:
            self.connections.release(host)
            if isinstance(error, OSError | DeadlinePassed):
                raise _classified(error, None) from None
            raise

        def opened_and_sent() -> SmtpReply:
            self._open(client, endpoint, credentials, token)
            return self._transaction(client, transaction)

        return self._submitted(client, key, host, opened_and_sent)

    def _submitted(
        self,
        client: BoundedSMTP,
        key: ConnectionKey,
        host: str,
        transaction: Callable[[], SmtpReply],
    ) -> SmtpReply:
        """Run ``transaction`` on ``client``: kept after the server's acceptance, closed
        (its slot given back) after anything else."""
        try:
            reply = transaction()
        except BaseException as error:
            self.connections.discard(host, client)
            if isinstance(error, SmtpError):
                raise
            if isinstance(error, OSError | smtplib.SMTPException):
                raise _classified(error, client) from None
            raise
        self.connections.keep(key, host, client)
        return reply

    def _open(
        self,
        client: BoundedSMTP,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        token: str | None,
    ) -> None:
        code, greeting = client.connect(endpoint.host, endpoint.port)
        if code != 220:
            raise _by_code(code, greeting, "the server refused the connection")
        client.ehlo()
        if endpoint.security == "starttls":
            if not client.has_extn("starttls"):
                raise SmtpRejected("the server does not offer STARTTLS")
            client.starttls(context=self._tls())
            client.ehlo()
        self._login(client, endpoint.username, credentials, token)

    @staticmethod
    def _transaction(client: BoundedSMTP, transaction: Transaction) -> SmtpReply:
        submission = transaction.submission
        client.before_end = transaction.confirm
        try:
            refused = client.sendmail(
                submission.sender, list(submission.recipients), submission.message
            )
        except EndWithheld:
            raise SmtpAbandoned("the caller withheld the end of the message") from None
        finally:
            client.before_end = None
        text = "250 accepted"
        if refused:
            codes = [str(code) for code, _ in list(refused.values())[:20]]
            text += f"; {len(refused)} recipients refused: " + ", ".join(codes)
        return SmtpReply(250, text)

    @staticmethod
    def _login(
        client: BoundedSMTP, username: str, credentials: Credentials, token: str | None
    ) -> None:
        if token is not None:
            auth: Callable[..., str] = lambda challenge=None: (  # noqa: E731
                f"user={username}\x01auth=Bearer {token}\x01\x01" if challenge is None else ""
            )
            client.auth("XOAUTH2", auth, initial_response_ok=True)
            return
        client.login(username, credentials.secret)


@dataclass(frozen=True, slots=True)
class Transaction:
    """A submission and the caller's ``confirm`` before its end."""

    submission: Submission
    confirm: Callable[[], bool] | None


def _dropped(error: BaseException) -> bool:
    """A kept connection that is gone (or going: 421), not a refusal nor a deadline."""
    if isinstance(error, smtplib.SMTPResponseException):
        return error.smtp_code == 421
    if isinstance(error, DeadlinePassed | TimeoutError | ReplyTooLarge):
        return False
    return isinstance(error, smtplib.SMTPServerDisconnected | OSError)


def _lost(client: BoundedSMTP | None, error: SmtpError) -> SmtpError:
    if client is not None and client.message_sent:
        return SmtpOutcomeUnknown(f"the message went out, then {error}")
    return error


def _classified(error: Exception, client: BoundedSMTP | None) -> SmtpError:  # noqa: PLR0911
    """What a failure of the transaction means for the message."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        answers = list(error.recipients.values())
        first = answers[0] if answers else (550, b"refused")
        if any(400 <= code < 500 for code, _ in answers):
            return SmtpTransient("recipients refused for now", _reply(*first))
        return SmtpRejected("every recipient was refused", _reply(*first))
    if isinstance(error, smtplib.SMTPNotSupportedError):
        return SmtpRejected(f"the server does not support it: {error}")
    if isinstance(error, smtplib.SMTPResponseException):
        if 400 <= error.smtp_code < 600:
            return _by_code(error.smtp_code, error.smtp_error, "the server refused")
        return _lost(client, SmtpTransient(f"an unexpected answer {error.smtp_code}"))
    if isinstance(error, DeadlinePassed | TimeoutError):
        return _lost(client, SmtpTimeout(f"deadline: {type(error).__name__}"))
    if isinstance(error, ReplyTooLarge):
        return _lost(client, SmtpTransient(str(error)))
    return _lost(client, SmtpTransient(f"network: {type(error).__name__}"))
