"""The Postfix policy service of ``bench/send.py``, in a process of its own.

Postfix asks it at end of data (``smtpd_end_of_data_restrictions``), just before its
``250``; it notes that instant and answers ``DUNNO``. It is part of the server side: run
inside the bench process, its answer waited for the GIL behind the worker's threads in
the tidings rounds and not in the loop's, which slowed only the side under test.

Run as a script: it prints its port, then one line a message, the ``perf_counter`` of
each end-of-data check (``CLOCK_MONOTONIC`` on Linux, the same clock in every process),
written before the answer, so the note is in the pipe before Postfix can answer ``250``.
"""

from __future__ import annotations

import contextlib
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


def serve() -> None:
    out = sys.stdout
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            state = b""
            for line in self.rfile:
                if line.startswith(b"protocol_state="):
                    state = line.strip()
                if line.strip():
                    continue
                if state == b"protocol_state=END-OF-MESSAGE":
                    at = time.perf_counter()
                    with lock:
                        out.write(f"{at!r}\n")
                        out.flush()
                self.wfile.write(b"action=DUNNO\n\n")
                self.wfile.flush()

    with contextlib.suppress(OSError):  # its name in cpu_by_program's table
        Path("/proc/self/comm").write_text("policy")
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    out.write(f"{server.server_address[1]}\n")
    out.flush()
    server.serve_forever()


class PolicyProcess:
    """The service started as a child; ``note`` is called with each acceptance's time
    (by a thread of the bench reading the pipe)."""

    def __init__(self, note: Callable[[float], None]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())
        self._reader = threading.Thread(target=self._read, args=(note,), daemon=True)
        self._reader.start()

    def _read(self, note: Callable[[float], None]) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            note(float(line))

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(10)


if __name__ == "__main__":
    serve()
