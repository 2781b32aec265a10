"""A loopback IMAP stand-in that records every line a client sends and refuses every
login: enough to see whether, and with what, a client logged in to it."""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import Self


class LoginRecorder:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.connections = 0
        self.lines: list[bytes] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
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
        self._thread.join(5)
        self._listener.close()

    @property
    def received(self) -> bytes:
        with self._lock:
            return b"".join(self.lines)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        with conn, conn.makefile("rb") as reader:
            conn.sendall(b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] recorder ready\r\n")
            for line in reader:
                with self._lock:
                    self.lines.append(line)
                if line.endswith(b"}\r\n"):  # a literal follows: ask for it
                    conn.sendall(b"+ go ahead\r\n")
                    continue
                words = line.strip().split(b" ", 2)
                tag, command = words[0], words[1].upper() if len(words) > 1 else b""
                if command == b"CAPABILITY":
                    conn.sendall(b"* CAPABILITY IMAP4rev1 AUTH=PLAIN\r\n" + tag + b" OK done\r\n")
                elif command == b"LOGOUT":
                    conn.sendall(b"* BYE\r\n" + tag + b" OK bye\r\n")
                    return
                else:
                    conn.sendall(tag + b" NO [AUTHENTICATIONFAILED] refused\r\n")
