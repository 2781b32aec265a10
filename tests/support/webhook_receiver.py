"""Real HTTP receivers on loopback for the webhook tests: each records what it got and
answers as its ``behaviour`` says (ok, fail, hang, redirect, an endless body…)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
