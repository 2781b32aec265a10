"""One thread per process that shuts sockets down at their deadlines (``WATCHDOG``).

``BoundedSMTP`` bounds every read and write by its attempt's deadline, and must also end
what a per-call timeout cannot (a TLS handshake a server drips, say): at the deadline
its socket is shut down. A ``threading.Timer`` per transaction did that, but starting a
thread costs about a millisecond on a busy machine, as much as a small message's whole
transaction over a kept connection; one thread with a heap of deadlines costs a push.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time


class Watchdog:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, sock: socket.socket) -> int:
        """Shut ``sock`` down at ``deadline`` (``time.monotonic()``) unless disarmed."""
        with self._changed:
            token = next(self._ids)
            self._armed[token] = sock
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="smtp-deadlines", daemon=True
                )
                self._thread.start()
            # The thread sleeps until the heap's first deadline, so only a new first one
            # needs it awake: a transaction arms later than those before it, and a wake
            # (a thread switch, the GIL handed over) cost as much as a tenth of a send's
            # CPU in the worker's profile.
            if self._heap[0][1] == token:
                self._changed.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._changed:
            self._armed.pop(token, None)  # its heap entry is dropped when it comes up
            if len(self._heap) > 2 * len(self._armed) + 1024:  # many disarmed: compact
                self._heap = [entry for entry in self._heap if entry[1] in self._armed]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._changed.wait()
                    continue
                deadline, token = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._heap)
                sock = self._armed.pop(token)
            with contextlib.suppress(OSError):
                # The plain socket's shutdown, also under TLS: the fd is what blocks.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


WATCHDOG = Watchdog()
