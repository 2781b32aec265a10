"""Fixtures of the process tests: a ``cli`` bound to this test's database (SQLite file
or PostgreSQL schema, see ``tests/conftest.py``) and a second, empty database."""

from __future__ import annotations

import base64
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import drop_schema
from tests.e2e.process import Cli, cli_env
from tests.support.later import later

PG_DSN = os.environ.get("TIDINGS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True, scope="session")
def e2e_logs() -> None:
    """The e2e tests log what they measured at INFO; pytest shows it with a failure (and
    with ``-o log_cli=true``)."""
    logging.getLogger("tests.e2e").setLevel(logging.INFO)


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Cli:
    key = base64.b64encode(os.urandom(32)).decode()
    env = cli_env(database_url=database_url, blob_dir=str(tmp_path / "blobs"), master_key=key)
    return Cli(tmp_path, env)


@pytest.fixture
def other_database_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """A second, empty database on the same backend (the target of an import)."""
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    schema = "t_" + uuid.uuid4().hex[:12]
    yield f"{PG_DSN}?schema={schema}"
    later(drop_schema, schema)
