"""Real HTTP receivers on loopback for the webhook tests: each records what it got and
answers as its ``behaviour`` says (ok, fail, hang, redirect, an endless body…); and a
silent host, which never answers and counts the connections open at once."""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def item(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value


@dataclass(frozen=True)
class Answer:
    status: int = 200
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    endless_body: bool = False


Behaviour = Callable[[Received], Answer]


def ok(_: Received) -> Answer:
    return Answer()


class Receiver:
    def __init__(self, behaviour: Behaviour = ok, port: int = 0) -> None:
        self.behaviour = behaviour
        self.received: list[Received] = []
        self.in_flight: dict[str, int] = {}
        self.max_in_flight_per_event = 0
        self._lock = threading.Lock()
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                got = Received(dict(self.headers.items()), self.rfile.read(length), time.time())
                event = got.headers.get("Tidings-Event-Id", "")
                with receiver._lock:
                    receiver.received.append(got)
                    receiver.in_flight[event] = receiver.in_flight.get(event, 0) + 1
                    receiver.max_in_flight_per_event = max(
                        receiver.max_in_flight_per_event, receiver.in_flight[event]
                    )
                try:
                    answer = receiver.behaviour(got)
                    if answer.delay:
                        time.sleep(answer.delay)
                    self.send_response(answer.status)
                    for name, value in answer.headers:
                        self.send_header(name, value)
                    if answer.endless_body:
                        self.send_header("Content-Length", str(1024**3))
                        self.end_headers()
                        chunk = b"x" * 65536
                        for _ in range(16384):  # 1 GiB, unless the client hangs up first
                            self.wfile.write(chunk)
                        return
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with receiver._lock:
                        receiver.in_flight[event] -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        # Polled 20 times a second, so ``stop`` (``shutdown``) returns at once, not after
        # up to the default half second.
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.item for r in self.received]

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        with self._lock:
            raise AssertionError(f"received {len(self.received)} of {count} in {timeout}s")


class SilentHost:
    """A host that accepts connections, reads whatever comes and never answers: it counts
    the connections accepted and those open at once (the sender opens one per attempt
    and closes it at its deadline, so these are the attempts in flight at the host)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.max_open = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._server.setblocking(False)
        self.port: int = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(0.05):
                    if key.fileobj is self._server:
                        self._accept(selector)
                    else:
                        self._read(selector, cast(socket.socket, key.fileobj))
            for conn in list(self._open):
                conn.close()
        self._server.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            conn, _ = self._server.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        selector.register(conn, selectors.EVENT_READ)
        with self._lock:
            self._open.add(conn)
            self.accepted += 1
            self.max_open = max(self.max_open, len(self._open))

    def _read(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the sender gave up and closed it
            selector.unregister(conn)
            conn.close()
            with self._lock:
                self._open.discard(conn)

    def wait_accepted(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.accepted >= count:
                return
            time.sleep(0.02)
        raise AssertionError(f"accepted {self.accepted} of {count} in {timeout}s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
