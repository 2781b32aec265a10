"""A hostile SMTP server on loopback, for the bounds of the SMTP client: it answers
every connection with one misbehaviour of its ``mode``:

- ``drip``: ``220 `` and then one byte every 0.2 s, never a line end;
- ``huge_line``: ``220 `` and megabytes without a line end, as fast as the client reads;
- ``endless``: ``220-`` continuation lines for ever (a reply that never ends);
- ``silent``: accepts and says nothing.

``connections`` counts what it accepted. Leaving the ``with`` block stops it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType
from typing import Literal, Self

Mode = Literal["drip", "huge_line", "endless", "silent"]


class HostileSmtpServer:
    host = "127.0.0.1"

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.connections = 0
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

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._misbehave, args=(conn,), daemon=True).start()

    def _misbehave(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if self.mode == "drip":
                conn.sendall(b"220 ")
                while not self._stop.wait(0.2):
                    conn.sendall(b"x")
            elif self.mode == "huge_line":
                conn.sendall(b"220 ")
                chunk = b"x" * 65536
                for _ in range(200):  # about 13 MB
                    if self._stop.is_set():
                        return
                    conn.sendall(chunk)
            elif self.mode == "endless":
                line = b"220-" + b"y" * 70 + b"\r\n"
                while not self._stop.is_set():
                    conn.sendall(line * 64)
            else:
                while not self._stop.wait(0.2):
                    time.sleep(0)
