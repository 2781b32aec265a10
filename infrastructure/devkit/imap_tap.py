"""A loopback TCP proxy in front of an IMAP server that counts what passes: the
client's command lines (``commands``: each a round trip, since the poll sends one
command and waits for its answer) and the bytes each way. The tests and ``bench/`` point
an account at ``port`` to see what a poll costs on the wire.

    with ImapTap((server.host, server.port)) as tap:
        ... connect the account to 127.0.0.1:tap.port, poll ...
        mark = tap.mark()
        ... poll again ...
        cost = tap.since(mark)   # commands, bytes sent and received since the mark

Lines are kept as the client sent them, up to ``MAX_LINE`` bytes each (a literal's bytes
are counted, not kept). Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Self

MAX_LINE = 512
_COMMAND = re.compile(rb"^[A-Za-z0-9.]+ [A-Za-z]")


@dataclass(frozen=True)
class Cost:
    commands: tuple[bytes, ...]
    sent: int  # bytes the client sent
    received: int  # bytes the server sent

    def count(self, word: bytes) -> int:
        """Commands whose verb (after the tag, and after ``UID``) is ``word``."""
        return sum(1 for c in self.commands if _verb(c) == word.upper())


def _verb(line: bytes) -> bytes:
    parts = line.split(b" ", 3)
    verb = parts[1].upper() if len(parts) > 1 else b""
    if verb == b"UID" and len(parts) > 2:
        return parts[2].upper()
    return verb


@dataclass(frozen=True)
class Mark:
    commands: int
    sent: int
    received: int


class ImapTap:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._commands: list[bytes] = []
        self._sent = self._received = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> Self:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        if self._listener is not None:
            self._listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.close()

    def mark(self) -> Mark:
        with self._lock:
            return Mark(len(self._commands), self._sent, self._received)

    def since(self, mark: Mark) -> Cost:
        with self._lock:
            return Cost(
                tuple(self._commands[mark.commands :]),
                self._sent - mark.sent,
                self._received - mark.received,
            )

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                with self._lock:
                    if not from_client:
                        self._received += len(data)
                        continue
                    self._sent += len(data)
                    pending += data
                    *lines, pending = pending.split(b"\r\n")
                    pending = pending[-MAX_LINE:]
                    self._commands += [
                        line[:MAX_LINE] for line in lines if _COMMAND.match(line[:MAX_LINE])
                    ]
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
