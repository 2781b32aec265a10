"""Fixtures of the worker end-to-end tests: per test a private Dovecot, a private
redis-server and a fresh PostgreSQL schema, wrapped in a ``Fleet`` that starts
``tidings worker`` processes and tears them all down, also when the test fails (their
logs are logged then, shown by pytest with the failure)."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.timing import WORKER_SETTINGS
from tests.e2e.workers.harness import DOVECOT_EXTRA, Fleet
from tests.e2e.workers.servers import RedisServer, drop_schema
from tests.support.dovecot import DovecotServer, dovecot_available
from tests.support.later import later

PG_DSN = os.environ.get("TIDINGS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

log = logging.getLogger(__name__)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/workers/" in str(item.fspath):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
def dovecot() -> Iterator[DovecotServer]:
    if not dovecot_available():
        pytest.fail("dovecot is not installed (apt-get install dovecot-imapd)", pytrace=False)
    with DovecotServer(extra_config=DOVECOT_EXTRA) as server:
        yield server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def pg_url() -> Iterator[str]:
    schema = "w_" + uuid.uuid4().hex[:12]
    yield f"{PG_DSN}?schema={schema}"
    later(drop_schema, PG_DSN, schema)


@pytest.fixture
def fleet(
    tmp_path: Path, dovecot: DovecotServer, redis_server: RedisServer, pg_url: str
) -> Iterator[Fleet]:
    world = Fleet(tmp_path, dovecot, redis_server, pg_url, dict(WORKER_SETTINGS))
    try:
        yield world
    finally:
        world.close()
        log.info("worker and dovecot logs:\n%s", world.logs())
