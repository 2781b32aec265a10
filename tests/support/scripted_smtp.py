"""A scripted SMTP server on loopback (cleartext, one connection), for the client's
pipelined transaction: it greets, answers EHLO with its ``extensions``, then reads until
``batch`` command lines came in before it answers any of them (a client that waits for
each answer before the next command gets none: ``batch`` records what it did send),
answers them with ``answers`` in order, and, after a 354, reads the message up to its
end (``message``) and answers ``after_end``. ``lines`` holds every line it read.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import BinaryIO, Self


class ScriptedSmtpServer:
    host = "127.0.0.1"

    def __init__(
        self,
        *,
        batch: int,
        answers: Sequence[bytes],
        extensions: Sequence[bytes] = (b"PIPELINING", b"SIZE 1000000"),
        after_end: bytes = b"250 2.0.0 queued",
        wait: float = 2.0,
    ) -> None:
        self.batch = batch
        self.answers = list(answers)
        self.extensions = list(extensions)
        self.after_end = after_end
        self.wait = wait
        self.first_batch: list[bytes] = []  # the command lines read before any answer
        self.lines: list[bytes] = []
        self.message: bytes | None = None  # the data up to its lone dot, when it came
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
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self._listener.settimeout(5)
        with contextlib.suppress(OSError):
            conn, _ = self._listener.accept()
            with conn:
                conn.settimeout(self.wait)
                self._converse(conn, conn.makefile("rb"))

    def _read(self, reader: BinaryIO) -> bytes:
        line = reader.readline(10_000)
        self.lines.append(line)
        return line

    def _converse(self, conn: socket.socket, reader: BinaryIO) -> None:
        conn.sendall(b"220 scripted ESMTP\r\n")
        self._read(reader)  # EHLO
        listed = [b"scripted", *self.extensions]
        conn.sendall(
            b"".join(
                b"250" + (b" " if n == len(listed) - 1 else b"-") + item + b"\r\n"
                for n, item in enumerate(listed)
            )
        )
        try:
            while len(self.first_batch) < self.batch:
                line = self._read(reader)
                if not line:
                    return
                self.first_batch.append(line)
        except TimeoutError:
            return  # the client waits for an answer: it did not pipeline
        conn.sendall(b"".join(answer + b"\r\n" for answer in self.answers))
        if not any(answer.startswith(b"354") for answer in self.answers):
            return
        data = b""
        with contextlib.suppress(TimeoutError):
            while (line := self._read(reader)) and line != b".\r\n":
                data += line
            if line == b".\r\n":
                self.message = data
                conn.sendall(self.after_end + b"\r\n")
                self._read(reader)  # QUIT, or the close
