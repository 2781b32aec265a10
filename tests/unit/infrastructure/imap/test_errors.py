import errno
import imaplib
import socket
import ssl

import pytest
from imapclient.exceptions import IMAPClientError, LoginError, ProtocolError

from application.mail.ports import (
    MailboxAuthError,
    MailboxThrottled,
    MailboxTransientError,
    MailboxUnreachable,
)
from infrastructure.imap.errors import classify, retry_after_hint


@pytest.mark.parametrize(
    "exc",
    [
        LoginError(b"[AUTHENTICATIONFAILED] Authentication failed."),
        LoginError("b'[AUTHENTICATIONFAILED] Invalid credentials (Failure)'"),
        IMAPClientError(b"[AUTHORIZATIONFAILED] not allowed"),
        IMAPClientError("AUTHENTICATE command error: BAD [b'[EXPIRED] token expired']"),
        LoginError("LOGIN failed."),  # no response code: still bad credentials
    ],
)
def test_auth_failures(exc: Exception) -> None:
    assert type(classify(exc, phase="login")) is MailboxAuthError


def test_no_during_login_without_code_is_auth() -> None:
    assert isinstance(classify(IMAPClientError(b"Invalid login"), phase="login"), MailboxAuthError)


@pytest.mark.parametrize(
    ("exc", "retry_after"),
    [
        (LoginError(b"[THROTTLED] Too many login attempts"), None),
        (IMAPClientError(b"[UNAVAILABLE] Temporary server failure, try again in 30 seconds"), 30),
        (IMAPClientError(b"[LIMIT] Too many concurrent requests"), None),
        (imaplib.IMAP4.abort("Too many simultaneous connections. (Failure)"), None),
        (LoginError("Maximum number of connections from user+IP exceeded"), None),
        (IMAPClientError(b"[UNAVAILABLE] please retry after 2 minutes"), 120),
        (IMAPClientError(b"Rate limit hit, wait 1.5s"), 1.5),
    ],
)
def test_throttling_with_the_server_suggested_delay(exc: Exception, retry_after: float) -> None:
    err = classify(exc, phase="login")
    assert isinstance(err, MailboxThrottled)
    assert err.retry_after == retry_after


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        OSError(errno.EHOSTUNREACH, "No route to host"),
        OSError(errno.ENETUNREACH, "Network is unreachable"),
        ssl.SSLCertVerificationError(1, "certificate verify failed"),
    ],
)
def test_unreachable(exc: Exception) -> None:
    assert type(classify(exc, phase="connect")) is MailboxUnreachable


def test_timeouts_unreachable_while_connecting_transient_afterwards() -> None:
    assert type(classify(TimeoutError("timed out"), phase="connect")) is MailboxUnreachable
    assert type(classify(TimeoutError("timed out"), phase="command")) is MailboxTransientError
    assert type(classify(TimeoutError("timed out"), phase="login")) is MailboxTransientError
    assert type(classify(ssl.SSLError("handshake"), phase="connect")) is MailboxUnreachable


@pytest.mark.parametrize(
    "exc",
    [
        imaplib.IMAP4.abort("socket error: EOF"),
        LoginError("command: LOGIN => socket error: EOF"),  # imapclient wraps aborts too
        LoginError("command: LOGIN => Shutting down"),
        IMAPClientError(b"[SERVERBUG] Internal error occurred."),
        ProtocolError("Expecting literal of size 10, got 11"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        BrokenPipeError(errno.EPIPE, "Broken pipe"),
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
        EOFError(),
        IMAPClientError(b"UID FETCH failed: [INUSE] mailbox locked"),
    ],
)
def test_transient(exc: Exception) -> None:
    assert type(classify(exc, phase="command")) is MailboxTransientError


def test_a_dropped_connection_during_login_is_not_an_auth_failure() -> None:
    err = classify(LoginError("command: LOGIN => socket error: EOF"), phase="login")
    assert type(err) is MailboxTransientError


def test_messages_carry_no_server_free_text() -> None:
    err = classify(LoginError(b"[AUTHENTICATIONFAILED] bad password for alice@example.com"))
    assert "alice" not in str(err) and "example.com" not in str(err)
    assert "AUTHENTICATIONFAILED" in str(err)


def test_port_errors_pass_through() -> None:
    err = MailboxAuthError("x")
    assert classify(err) is err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("try again in 30 seconds", 30),
        ("Retry after 5 min", 300),
        ("please wait 250ms", 0.25),
        ("retry in 1 hour", 3600),
        ("try again later", None),
        ("", None),
    ],
)
def test_retry_after_hint(text: str, seconds: float | None) -> None:
    assert retry_after_hint(text) == seconds
