"""Turn imapclient / socket / ssl failures into the mail port's errors. Pure.

Rules, first match wins:

1. A server text carrying a throttling marker (``[THROTTLED]``,
   ``[UNAVAILABLE]``, ``[LIMIT]``, "too many", "maximum number of
   connections", "rate limit", "try again later") → ``MailboxThrottled``,
   with the delay the text suggests ("retry in 30 seconds", "2 minutes").
2. ``[AUTHENTICATIONFAILED]``, ``[AUTHORIZATIONFAILED]``, ``[EXPIRED]`` →
   ``MailboxAuthError``.
3. A dropped connection (imaplib ``abort``, "socket error", EOF, BYE such as
   "Shutting down", ``[SERVERBUG]`` / ``[INUSE]``) → ``MailboxTransientError``,
   also during login: imapclient wraps those into ``LoginError`` too.
4. Any other ``LoginError`` or NO/BAD while logging in → ``MailboxAuthError``
   (many servers give no response code for bad credentials).
5. Refused connection, DNS failure, no route, TLS handshake or certificate
   rejection, or a timeout while connecting → ``MailboxUnreachable``.
6. The total deadline of an operation passed (``wire.DeadlinePassed``), in any phase
   → ``MailboxTimeout``.
7. Anything else from the socket, ssl, imaplib or imapclient (timeouts,
   aborts, BYE, NO/BAD) → ``MailboxTransientError``.

The new error's message carries only the failure's kind and any bracketed
response code, never the server's free text (it may echo an address).
"""

from __future__ import annotations

import errno
import imaplib
import re
import socket
import ssl
from typing import Literal

from imapclient.exceptions import IMAPClientError, LoginError

from application.mail.ports import (
    MailboxAuthError,
    MailboxThrottled,
    MailboxTimeout,
    MailboxTransientError,
    MailboxUnreachable,
    MailProviderError,
)
from infrastructure.imap.wire import DeadlinePassed

Phase = Literal["connect", "login", "command"]

_THROTTLE = re.compile(
    r"\[(?:THROTTLED|UNAVAILABLE|LIMIT)\b|too many|maximum number of connections"
    r"|rate.?limit|try again later|temporarily unavailable",
    re.IGNORECASE,
)
_AUTH_CODES = re.compile(r"\[(?:AUTHENTICATIONFAILED|AUTHORIZATIONFAILED|EXPIRED)\]", re.I)
_DROPPED = re.compile(
    r"socket error|\bEOF\b|shutting down|timed out|connection (?:reset|closed|lost)"
    r"|disconnect|\[(?:SERVERBUG|INUSE)\]",
    re.IGNORECASE,
)
_RESPONSE_CODE = re.compile(r"\[([A-Z][A-Z0-9.-]*)[^\]]*\]")
_DELAY = re.compile(
    r"(?:retry|try again|wait|after)\D{0,20}?(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?\b",
    re.IGNORECASE,
)
_UNIT_SECONDS = {"ms": 0.001, "m": 60.0, "h": 3600.0}
_UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.EHOSTDOWN,
    errno.EADDRNOTAVAIL,
}


def classify(exc: BaseException, *, phase: Phase = "command") -> MailProviderError:  # noqa: PLR0911
    """Map a low-level failure to the port's error (to be raised ``from None``)."""
    if isinstance(exc, MailProviderError):
        return exc
    if isinstance(exc, DeadlinePassed):
        return MailboxTimeout("the operation's deadline passed")
    text = _text(exc)
    kind = type(exc).__name__
    code = _response_code(text)
    suffix = f" [{code}]" if code else ""
    if _THROTTLE.search(text):
        return MailboxThrottled(f"server throttled ({kind}){suffix}", retry_after_hint(text))
    if _AUTH_CODES.search(text):
        return MailboxAuthError(f"login rejected ({kind}){suffix}")
    if isinstance(exc, imaplib.IMAP4.abort) or (
        isinstance(exc, IMAPClientError) and _DROPPED.search(text)
    ):
        return MailboxTransientError(f"connection dropped during {phase} ({kind}){suffix}")
    if isinstance(exc, LoginError) or (
        phase == "login" and isinstance(exc, IMAPClientError | UnicodeError)
    ):
        return MailboxAuthError(f"login rejected ({kind}){suffix}")
    if _unreachable(exc, phase):
        return MailboxUnreachable(f"cannot connect ({kind})")
    if isinstance(exc, OSError | EOFError | IMAPClientError | imaplib.IMAP4.error):
        return MailboxTransientError(f"mailbox error during {phase} ({kind}){suffix}")
    return MailboxTransientError(f"unexpected failure during {phase} ({kind})")


def retry_after_hint(text: str) -> float | None:
    """Seconds a server asks us to wait, when its text says so."""
    match = _DELAY.search(text)
    if not match:
        return None
    value = float(match.group(1))
    unit = (match.group(2) or "s").lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return value * _UNIT_SECONDS["ms"]
    return value * _UNIT_SECONDS.get(unit[0], 1.0)


def _unreachable(exc: BaseException, phase: Phase) -> bool:
    if isinstance(exc, socket.gaierror | ConnectionRefusedError | ssl.SSLCertVerificationError):
        return True
    if phase == "connect" and isinstance(exc, TimeoutError | ssl.SSLError):
        return True
    return isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS


def _response_code(text: str) -> str | None:
    match = _RESPONSE_CODE.search(text)
    return match.group(1) if match else None


def _text(exc: BaseException) -> str:
    parts = []
    for arg in exc.args:
        if isinstance(arg, bytes):
            parts.append(arg.decode("utf-8", "replace"))
        else:
            parts.append(str(arg))
    return " ".join(parts)
