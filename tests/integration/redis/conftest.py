"""Redis fixtures: the shared server at 127.0.0.1:6379 (``TIDINGS_TEST_REDIS``), a random key
prefix per test (other runs use the same server), and a closed port for "Redis is down"."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest
import redis

from infrastructure.redis.client import redis_client
from tests.integration.redis.proxy import TcpProxy

REDIS_URL = os.environ.get("TIDINGS_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def prefix() -> str:
    return f"tidings-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def client(prefix: str) -> Iterator[redis.Redis]:
    client = redis_client(REDIS_URL)
    yield client
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    pool = redis.ConnectionPool.from_url(REDIS_URL)
    target = (pool.connection_kwargs["host"], int(pool.connection_kwargs["port"]))
    proxy = TcpProxy(target, int(pool.connection_kwargs.get("db", 0))).start()
    yield proxy
    proxy.stop()
