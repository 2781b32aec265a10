"""A TCP proxy on loopback in front of a real server, for tests of kept connections:
it counts the connections it accepted and ``cut()`` drops every open one at once (as a
server restart or a NAT timeout would), without the server itself going away.

Leaving the ``with`` block stops it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self


class TcpProxy:
    host = "127.0.0.1"

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self.connections = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server((self.host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def cut(self) -> None:
        """Drop every open connection, both sides."""
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self._target, timeout=5)
            server.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
