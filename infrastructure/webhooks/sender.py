"""One HTTP POST of one delivery, bounded in time and memory.

- The destination rule runs before every attempt (DNS answers change) and the
  connection goes to the very address that was checked, so a name cannot resolve to a
  public address for the check and a private one for the connection.
- The whole attempt (connect, send, status line, headers, a few KB of body) has one
  deadline: a watchdog shuts the socket down when it passes, so an endpoint that
  trickles one byte a second is cut off like one that never answers.
- Redirects are answered as failures, never followed; at most ``MAX_BODY`` bytes of the
  response are read (an excerpt is kept for the delivery's ``lastError``).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time

from application.destinations import IpAddress, check_addresses
from application.mail.ports import MailProviderError
from application.webhooks.delivery_ports import Outcome
from domain.webhook import Target
from infrastructure.net_policy import resolve

MAX_BODY = 4096
USER_AGENT = "tidings-webhooks/1"


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, target: Target, address: IpAddress, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self._address), self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    def __init__(self, target: Target, address: IpAddress, timeout: float) -> None:
        super().__init__(target, address, timeout)
        self._context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


class HttpSender:
    """Implements ``WebhookSender``: posts a body to a target under a deadline; never
    raises for the endpoint's sake."""

    def __init__(self, *, timeout: float, allow_private: bool) -> None:
        self.timeout = timeout
        self.allow_private = allow_private

    def post(self, target: Target, body: bytes, headers: dict[str, str]) -> Outcome:
        started = time.monotonic()
        try:
            addresses = resolve(target.host, target.port, timeout=self.timeout)
            if not self.allow_private:
                check_addresses(target.host, addresses)
        except MailProviderError as error:
            return Outcome(None, type(error).__name__, time.monotonic() - started)
        kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
        conn = kind(target, addresses[0], self.timeout)
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.timeout, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request(
                "POST",
                target.path,
                body=body,
                headers={
                    **headers,
                    "Content-Type": "application/json",
                    "User-Agent": USER_AGENT,
                    "Connection": "close",
                },
            )
            response = conn.getresponse()
            excerpt = response.read(MAX_BODY)
            status = response.status
        except (OSError, http.client.HTTPException, ValueError) as error:
            reason = "timeout" if expired.is_set() else type(error).__name__
            return Outcome(None, reason, time.monotonic() - started)
        finally:
            watchdog.cancel()
            conn.close()
        seconds = time.monotonic() - started
        if expired.is_set():
            return Outcome(None, "timeout", seconds)
        if 200 <= status < 300:
            return Outcome(status, None, seconds)
        if 300 <= status < 400:
            return Outcome(status, "redirect not followed", seconds)
        text = excerpt[:200].decode("utf-8", "replace")
        return Outcome(status, f"HTTP {status}: {text}" if text else f"HTTP {status}", seconds)
