"""``SmtpSubmitter``: the ``SmtpSubmission`` port on ``BoundedSMTP``.

One connection per attempt: connect to an address the destination check approved
(implicit TLS, or STARTTLS that must be offered: never cleartext), EHLO, log in (PLAIN or
LOGIN with the password; XOAUTH2 with an access token from the ``TokenProvider``, the
IMAP path's single-flight refresh, once more after a refused token), MAIL, RCPT for each
recipient, DATA. The server's answers decide: 2xx sent; 4xx, a network failure or the
deadline before the message went out ``SmtpTransient``; 5xx ``SmtpRejected``; a failure
after the whole message went out ``SmtpOutcomeUnknown`` (the server may have taken it).
Some recipients refused while others were taken is a send, with the refusals in the reply.
"""

from __future__ import annotations

import contextlib
import logging
import smtplib
import ssl
from collections.abc import Callable

from application.mail.oauth import is_grant
from application.mail.outbound.ports import (
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
from infrastructure.smtp.client import BoundedSMTP, DeadlinePassed, ReplyTooLarge

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
    ) -> None:
        self._tokens = token_provider
        self._context = ssl_context
        self._local_hostname = local_hostname

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
    ) -> SmtpReply:
        token = self._token(credentials, account_id)
        try:
            return self._attempt(endpoint, credentials, token, submission, deadline)
        except SmtpRejected as refused:
            if token is None or not is_grant(credentials.secret) or self._tokens is None:
                raise
            if refused.reply is None or refused.reply.code not in (334, 535):
                raise
            # A token we took for valid was refused: one refresh, one more try.
            fresh = self._tokens.get_access_token(account_id, refused=token)
            if fresh == token:
                raise
            return self._attempt(endpoint, credentials, fresh, submission, deadline)

    def _token(self, credentials: Credentials, account_id: str) -> str | None:
        if credentials.method != "xoauth2":
            return None
        if self._tokens is None:
            return credentials.secret
        return self._tokens.get_access_token(account_id)

    def _attempt(
        self,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        token: str | None,
        submission: Submission,
        deadline: float,
    ) -> SmtpReply:
        client: BoundedSMTP | None = None
        try:
            client = BoundedSMTP(
                endpoint.host,
                deadline=deadline,
                addresses=endpoint.addresses,
                implicit_tls=self._tls() if endpoint.security == "tls" else None,
                local_hostname=self._local_hostname,
            )
            return self._transaction(client, endpoint, credentials, token, submission)
        except SmtpError:
            raise
        except (OSError, smtplib.SMTPException) as error:
            raise _classified(error, client) from None
        finally:
            if client is not None:
                client.close()

    def _transaction(
        self,
        client: BoundedSMTP,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        token: str | None,
        submission: Submission,
    ) -> SmtpReply:
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
        refused = client.sendmail(
            submission.sender, list(submission.recipients), submission.message
        )
        with contextlib.suppress(Exception):
            client.quit()
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
