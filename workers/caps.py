"""Connection caps: at most ``per_account`` sockets per account and, per IMAP host in
this worker, the cap of the host's provider (``application.mail.providers``: Gmail 15,
Outlook 15, Yahoo 10) or ``per_host`` for a host no provider matches; each slot held for
its socket's lifetime.

``CappedProvider`` wraps any ``MailProvider``: ``open`` takes both slots or raises
``MailboxThrottled`` at once (the caller's backoff / next tick retries), and the
session's ``close`` gives them back — exactly once, however often it is called.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import TracebackType
from typing import Any, Self

from application import worker_defaults as defaults
from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxSession,
    MailboxThrottled,
    MailProvider,
    OpenOptions,
)
from application.mail.providers import ProviderTable, normalise_host

PER_ACCOUNT = 4  # IDLE, a poll, and room for a reconnect overlapping either


class ConnectionCaps:
    def __init__(
        self,
        per_account: int = PER_ACCOUNT,
        per_host: int = defaults.PER_HOST_CONN_CAP,
        providers: ProviderTable | None = None,
    ) -> None:
        self.per_account = per_account
        self.per_host = per_host
        self.providers = providers or ProviderTable()
        self._accounts: Counter[str] = Counter()
        self._hosts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, account_id: str, host: str) -> bool:
        with self._lock:
            if self._accounts[account_id] >= self.per_account:
                return False
            if self._hosts[host] >= self.host_cap(host):
                return False
            self._accounts[account_id] += 1
            self._hosts[host] += 1
            return True

    def host_cap(self, host: str) -> int:
        """The host's provider's cap (``per_host`` for a host no provider matches)."""
        return self.providers.conn_cap(host, self.per_host)

    def give(self, account_id: str, host: str) -> None:
        with self._lock:
            self._accounts[account_id] -= 1
            self._hosts[host] -= 1
            if self._accounts[account_id] <= 0:
                del self._accounts[account_id]
            if self._hosts[host] <= 0:
                del self._hosts[host]


class _CappedSession:
    """Delegates to the real session; gives its slots back on the first close."""

    def __init__(self, inner: MailboxSession, release: Any) -> None:
        self._inner = inner
        self._release = release
        self._released = False
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            with self._lock:
                release, self._released = not self._released, True
            if release:
                self._release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class CappedProvider:
    def __init__(self, inner: MailProvider, caps: ConnectionCaps) -> None:
        self._inner = inner
        self.caps = caps

    def open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> MailboxSession:
        account_id, host = options.account_id, normalise_host(endpoint.host)
        if not self.caps.take(account_id, host):
            raise MailboxThrottled("local connection cap reached", retry_after=5.0)
        try:
            session = self._inner.open(endpoint, credentials, options)
        except BaseException:
            self.caps.give(account_id, host)
            raise
        capped: MailboxSession = _CappedSession(session, lambda: self.caps.give(account_id, host))
        return capped
