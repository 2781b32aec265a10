"""``KeptConnections``: a worker's SMTP connections between an account's messages, and
its connection slots per host.

A connection whose transaction ended in the server's acceptance is kept, logged in,
under its key (the account, the endpoint and a digest of the credentials: never shared
between accounts, nor across a changed password or server), for the account's next
message. It waits at most ``idle_seconds`` (``close_idle``, which the outbox thread
calls on every turn, and ``take`` close older ones), at most ``max_kept`` wait at once
(the oldest goes first), and ``close_all`` ends them on shutdown. An account whose series
runs several lanes keeps a connection per lane under the same key (``take`` gives the
one kept last).

Every connection, busy or kept, holds a slot of its host (the provider's cap): a new
connection waits for one within its attempt's deadline, and takes one from a kept
connection of the same host (closing it) rather than wait while one sits idle.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from application.mail.outbound.ports import SmtpEndpoint
from application.mail.ports import Credentials
from infrastructure.smtp.client import BoundedSMTP

ConnectionKey = tuple[str, ...]


def connection_key(
    account_id: str, endpoint: SmtpEndpoint, credentials: Credentials
) -> ConnectionKey:
    secret = hashlib.sha256(credentials.secret.encode("utf-8", "replace")).hexdigest()
    return (
        account_id,
        endpoint.host.lower(),
        str(endpoint.port),
        endpoint.security,
        endpoint.username,
        ",".join(endpoint.addresses),
        credentials.method,
        secret,
    )


@dataclass
class _Kept:
    client: BoundedSMTP
    host: str
    since: float


class KeptConnections:
    def __init__(
        self,
        cap: Callable[[str], int],
        *,
        max_kept: int = 8,
        idle_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cap = cap
        self._max_kept = max_kept
        self._idle = idle_seconds
        self._clock = clock
        # Oldest first; a key may hold several (one per lane of the account's series).
        self._kept: OrderedDict[tuple[ConnectionKey, int], _Kept] = OrderedDict()
        self._serial = 0
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    # -- slots -----------------------------------------------------------------------------

    def _slot(self, host: str) -> threading.BoundedSemaphore:
        with self._lock:
            slot = self._slots.get(host)
            if slot is None:
                slot = self._slots[host] = threading.BoundedSemaphore(max(1, self._cap(host)))
            return slot

    def acquire(self, host: str, deadline: float) -> bool:
        """A slot for a new connection to ``host`` before ``deadline``; a kept connection
        of the host gives its slot up first."""
        slot = self._slot(host)
        if slot.acquire(blocking=False):
            return True
        self._close(self._evict(lambda kept: kept.host == host))
        return slot.acquire(timeout=max(0.0, deadline - self._clock()))

    def release(self, host: str) -> None:
        self._slot(host).release()

    # -- kept connections ------------------------------------------------------------------

    def take(self, key: ConnectionKey) -> BoundedSMTP | None:
        """The key's kept connection (its slot stays held), else None."""
        self.close_idle()
        with self._lock:
            mine = [entry for entry in reversed(self._kept) if entry[0] == key]
            kept = self._kept.pop(mine[0]) if mine else None
        return kept.client if kept is not None else None

    def keep(self, key: ConnectionKey, host: str, client: BoundedSMTP) -> None:
        """Keep a connection whose transaction ended well (it holds a slot of ``host``)."""
        client.disarm()
        if self._max_kept <= 0 or client.has_pending_bytes():
            self._close([_Kept(client, host, 0.0)])
            return
        with self._lock:
            self._serial += 1
            self._kept[key, self._serial] = _Kept(client, host, self._clock())
            over = []
            while len(self._kept) > self._max_kept:
                over.append(self._kept.popitem(last=False)[1])
        self._close(over)

    def discard(self, host: str, client: BoundedSMTP) -> None:
        """A connection that is not kept: closed, its slot given back."""
        self._close([_Kept(client, host, 0.0)])

    def close_idle(self) -> int:
        now = self._clock()
        return self._close(self._evict(lambda kept: now - kept.since >= self._idle, every=True))

    def close_all(self) -> int:
        return self._close(self._evict(lambda kept: True, every=True))

    def _evict(self, which: Callable[[_Kept], bool], *, every: bool = False) -> list[_Kept]:
        with self._lock:
            keys = [key for key, kept in self._kept.items() if which(kept)]
            if not every:
                keys = keys[:1]
            return [self._kept.pop(key) for key in keys]

    def _close(self, connections: list[_Kept]) -> int:
        for kept in connections:
            _goodbye(kept.client)
            self.release(kept.host)
        return len(connections)


def _goodbye(client: BoundedSMTP) -> None:
    """QUIT without waiting for the answer (a server cannot hold the closing thread)."""
    sock = client.sock
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):
            sock.settimeout(0.2)
            sock.sendall(b"QUIT\r\n")
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        client.close()
