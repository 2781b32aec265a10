"""``BoundedSMTP``: ``smtplib.SMTP`` with a total deadline and bounded replies.

``smtplib`` reads replies with ``file.readline(_MAXLINE + 1)`` (8,192 bytes: a longer
line raises "Line too long") but keeps every line of a multi-line reply, with no cap on
their number, and each socket operation waits ``timeout`` anew, so a server that drips a
byte at a time, or answers ``250-`` lines for ever, holds the client as long as it likes.
Here replies are read from the socket directly: at most ``MAX_LINE`` bytes a line,
``MAX_REPLY_LINES`` lines and ``MAX_REPLY_BYTES`` bytes a reply (``ReplyTooLarge``);
every read and write waits at most until the attempt's ``deadline`` (``time.monotonic()``),
and the ``WATCHDOG`` shuts the socket down at the deadline whatever it is doing (a TLS handshake
included). Bytes a server sends after its STARTTLS answer, before the handshake (a
command injection), are refused.

``data`` records that the whole message went out (``message_sent``): a failure after it
may follow the server's acceptance, which the caller must not take for a refusal. Where
``before_end`` is set, ``data`` sends the message's bytes, then asks it before sending
the end of data (the lone dot): no, or an exception, and the connection is closed with
the end withheld (``EndWithheld``); a server takes no message without its end, so the
caller may let the bytes travel while it makes sure it may send.

A connection kept for an account's next message (``infrastructure.smtp.kept``) is
``disarm``ed while it waits (no timer) and ``rearm``ed with the next attempt's deadline.
"""

from __future__ import annotations

import functools
import smtplib
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from infrastructure.smtp.watchdog import WATCHDOG

MAX_LINE = 8192  # smtplib's _MAXLINE
MAX_REPLY_LINES = 100
MAX_REPLY_BYTES = 64 * 1024
CRLF = b"\r\n"


class ReplyTooLarge(OSError):
    """A reply line, or a whole reply, past its bound."""


class DeadlinePassed(TimeoutError):
    pass


class EndWithheld(Exception):
    """``before_end`` said no: the message's end never went out."""


class BoundedSMTP(smtplib.SMTP):
    def __init__(
        self,
        host: str,
        *,
        deadline: float,
        addresses: Sequence[str] = (),
        implicit_tls: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
    ) -> None:
        self._deadline = deadline
        self._addresses = tuple(addresses)
        self._implicit_tls = implicit_tls
        self._buffer = b""
        self._watch: int | None = None
        self.message_sent = False
        self.before_end: Callable[[], bool] | None = None
        super().__init__(local_hostname=local_hostname, timeout=self._remaining())
        self._host = host

    # -- time ----------------------------------------------------------------------------

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("the attempt's deadline passed")
        return left

    def _arm(self, sock: socket.socket) -> None:
        """Shut the socket down at the deadline: a blocked read or handshake ends then."""
        self._watch = WATCHDOG.arm(self._deadline, sock)

    def disarm(self) -> None:
        """No deadline while the connection waits, kept, for its account's next message."""
        if self._watch is not None:
            WATCHDOG.disarm(self._watch)
            self._watch = None

    def rearm(self, deadline: float) -> None:
        """A new transaction on this connection, bounded by its own ``deadline``."""
        self.disarm()
        self._deadline = deadline
        self.message_sent = False
        if self.sock is None:
            raise smtplib.SMTPServerDisconnected("not connected")
        self._remaining()
        self._arm(self.sock)

    def has_pending_bytes(self) -> bool:
        """Bytes the server sent that no reply took: such a connection is not kept."""
        return bool(self._buffer)

    def close(self) -> None:
        self.disarm()
        super().close()

    # -- the socket ------------------------------------------------------------------------

    def _get_socket(self, host: str, port: int, timeout: float | None) -> socket.socket:
        targets = self._addresses or (host,)
        last: OSError | None = None
        sock: socket.socket | None = None
        for target in targets:
            try:
                sock = socket.create_connection((target, port), self._remaining())
                break
            except OSError as error:
                last = error
        if sock is None:
            raise last or OSError(f"no address to connect to for {host}")
        # The end of data may follow the message's bytes as a write of its own: no
        # waiting for their acknowledgement (Nagle) before it goes.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm(sock)
        if self._implicit_tls is not None:
            sock.settimeout(self._remaining())
            sock = self._implicit_tls.wrap_socket(sock, server_hostname=self._host)
        return sock

    def send(self, s: Any) -> None:
        if self.sock is not None:
            self.sock.settimeout(self._remaining())
        super().send(s)

    def starttls(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        if self.sock is not None:
            self.sock.settimeout(self._remaining())
        answer: tuple[int, bytes] = super().starttls(*args, **kwargs)
        if self._buffer:
            raise smtplib.SMTPResponseException(554, b"data after the STARTTLS reply")
        return answer

    def _line(self) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
                return line
            if len(self._buffer) > MAX_LINE:
                raise ReplyTooLarge("a reply line is too long")
            if self.sock is None:
                raise smtplib.SMTPServerDisconnected("not connected")
            self.sock.settimeout(self._remaining())
            chunk = self.sock.recv(MAX_LINE)
            if not chunk:
                if time.monotonic() >= self._deadline:  # the timer cut it
                    raise DeadlinePassed("the attempt's deadline passed")
                raise smtplib.SMTPServerDisconnected("connection closed by the server")
            self._buffer += chunk

    def getreply(self) -> tuple[int, bytes]:
        lines: list[bytes] = []
        total = 0
        code = -1
        while True:
            try:
                line = self._line()
            except (OSError, DeadlinePassed) as error:
                if isinstance(error, ReplyTooLarge | TimeoutError | smtplib.SMTPServerDisconnected):
                    self.close()
                    raise
                self.close()
                raise smtplib.SMTPServerDisconnected(f"connection lost: {error}") from error
            total += len(line)
            if len(line) > MAX_LINE or total > MAX_REPLY_BYTES or len(lines) >= MAX_REPLY_LINES:
                self.close()
                raise ReplyTooLarge("the reply is too large")
            text = line[4:].strip(b" \t\r\n")
            try:
                code = int(line[:3])
            except ValueError:
                code = -1
                break
            lines.append(text)
            if line[3:4] != b"-":
                break
        message = b"\n".join(lines)
        return code, message

    def sendmail(
        self,
        from_addr: str,
        to_addrs: str | Sequence[str],
        msg: Any,
        mail_options: Sequence[str] = (),
        rcpt_options: Sequence[str] = (),
    ) -> dict[str, tuple[int, bytes]]:
        """``smtplib``'s transaction; where the server offers PIPELINING (RFC 2920), MAIL,
        every RCPT and DATA go out in one write and their answers are read in order: one
        round trip before the message's bytes instead of two plus one a recipient.
        Any refusal raises what ``smtplib`` raises; the caller closes the connection
        then (answers still unread, or a DATA the server took, never reach an end)."""
        self.ehlo_or_helo_if_needed()
        plain = mail_options or rcpt_options or isinstance(to_addrs, str) or not to_addrs
        if plain or not isinstance(msg, bytes) or not self.has_extn("pipelining"):
            return super().sendmail(from_addr, to_addrs, msg, mail_options, rcpt_options)
        size = f" size={len(msg)}" if self.has_extn("size") else ""
        commands = [
            f"mail FROM:{_quoted(from_addr)}{size}",
            *(f"rcpt TO:{_quoted(address)}" for address in to_addrs),
            "data",
        ]
        if any("\r" in command or "\n" in command for command in commands):
            raise ValueError("an address with a line break")  # as smtplib's putcmd
        self.send("".join(f"{command}\r\n" for command in commands))
        code, answer = self.getreply()
        if code != 250:
            raise smtplib.SMTPSenderRefused(code, answer, from_addr)
        refused: dict[str, tuple[int, bytes]] = {}
        for address in to_addrs:
            code, answer = self.getreply()
            if code not in (250, 251):
                refused[address] = (code, answer)
            if code == 421:  # the server is closing: DATA's answer will not come
                raise smtplib.SMTPRecipientsRefused(refused)
        code, answer = self.getreply()  # DATA's
        if len(refused) == len(to_addrs):
            raise smtplib.SMTPRecipientsRefused(refused)
        if code != 354:
            raise smtplib.SMTPDataError(code, answer)
        code, answer = self._message(msg)
        if code != 250:
            raise smtplib.SMTPDataError(code, answer)
        return refused

    def data(self, msg: Any) -> tuple[int, bytes]:
        """``smtplib``'s DATA, noting when the whole message went out."""
        self.putcmd("data")
        code, answer = self.getreply()
        if code != 354:
            raise smtplib.SMTPDataError(code, answer)
        return self._message(msg)

    def _message(self, msg: Any) -> tuple[int, bytes]:
        """The message's bytes after DATA's 354, its end (held for ``before_end``), and
        the server's answer."""
        quoted = smtplib._quote_periods(msg)  # type: ignore[attr-defined]
        if quoted[-2:] != CRLF:
            quoted += CRLF
        if self.before_end is None:
            self.send(quoted + b"." + CRLF)
        else:
            self.send(quoted)
            self._hold_end(self.before_end)
            self.send(b"." + CRLF)
        self.message_sent = True
        return self.getreply()

    def _hold_end(self, before_end: Callable[[], bool]) -> None:
        try:
            go_on = before_end()
        except BaseException:
            self.close()
            raise
        if not go_on:
            self.close()
            raise EndWithheld("the end of data was withheld")


def _quoted(address: str) -> str:
    """``smtplib.quoteaddr``, remembered for addresses of a usual length: it parses the
    address with ``email.utils`` on every call (5% of a lane's CPU), and a series sends
    from one address to few."""
    return _remembered(address) if len(address) <= 320 else smtplib.quoteaddr(address)


@functools.lru_cache(maxsize=1024)  # at most 1,024 addresses of 320 characters
def _remembered(address: str) -> str:
    return smtplib.quoteaddr(address)
