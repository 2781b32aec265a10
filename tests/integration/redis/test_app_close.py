"""``app.close()`` closes every Redis connection the app opened (signals, user activity,
the OAuth refresh lock), seen from the Redis server's own client list."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from application import User
from application.app import App
from infrastructure.redis.client import redis_client, replied
from tests.integration.redis.conftest import REDIS_URL
from tests.support.results import ok


def connections_named(name: str) -> int:
    probe = redis_client(REDIS_URL)
    try:
        return sum(1 for c in replied(probe.client_list()) if c.get("name") == name)
    finally:
        probe.close()


def test_closing_the_app_closes_its_redis_connections(make_app: Callable[..., App]) -> None:
    name = f"tidings-close-{uuid.uuid4().hex[:8]}"
    app = make_app(redis_url=f"{REDIS_URL}?client_name={name}")
    member = User(id="u1", tenant_id=f"t-{uuid.uuid4().hex[:8]}", roles=frozenset({"TenantMember"}))
    ok(app.write("user-active", {}, member))  # records activity, publishes a signal
    opened = time.monotonic() + 5  # sent by the write-behind threads, soon after
    while not connections_named(name) and time.monotonic() < opened:
        time.sleep(0.05)
    assert connections_named(name) >= 1
    app.close()
    deadline = time.monotonic() + 5
    while connections_named(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connections_named(name) == 0
