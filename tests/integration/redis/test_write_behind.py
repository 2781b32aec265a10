"""The write-behind thread of the best-effort Redis writes: callers never wait for a
server that does not answer, what is pending is bounded (the rest dropped and logged),
keyed commands coalesce, keyless ones keep their order, and ``flush`` waits for them."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from infrastructure.redis.client import redis_client
from infrastructure.redis.write_behind import Command, WriteBehind
from tests.integration.redis.conftest import REDIS_URL


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_silent_server_never_holds_the_caller_and_the_pending_are_bounded(
    silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis_client(f"redis://127.0.0.1:{silent_port}/0", timeout=0.5, retries=0)
    failed: list[int] = []
    behind = WriteBehind(client, "test", lambda _error, batch: failed.append(len(batch)), limit=5)
    started = time.monotonic()
    behind.put(Command("publish", ("c", "first")))
    time.sleep(0.1)  # the writer is now waiting for the silent server
    for n in range(100):
        behind.put(Command("publish", ("c", str(n))))
    assert time.monotonic() - started < 0.3
    assert behind.flush(5.0)
    assert sum(failed) == 6  # the first, then five; 95 were dropped
    behind.put(Command("publish", ("c", "after")))
    assert behind.flush(5.0)
    behind.close()
    assert any("write_behind_dropped" in r.getMessage() for r in caplog.records)


def test_keyed_commands_coalesce_and_keyless_ones_keep_their_order() -> None:
    client = redis_client(REDIS_URL)
    channel = f"tidings-test-{uuid.uuid4().hex[:8]}"
    key = f"{channel}:k"
    listener = client.pubsub()
    listener.subscribe(channel)
    assert listener.get_message(timeout=2.0) is not None  # the subscription's confirmation
    behind = WriteBehind(client, "test", lambda _error, _batch: None)
    for n in range(200):
        behind.put(Command("set", (key, str(n)), {"px": 60_000}), key)
        behind.put(Command("publish", (channel, str(n))))
    assert behind.flush(5.0)
    assert client.get(key) == "199"
    got = []
    while (message := listener.get_message(timeout=1.0)) is not None:
        got.append(int(message["data"]))
    assert got == list(range(200))
    behind.close()
    client.delete(key)
    listener.close()
    client.close()
