"""Shared fixtures. ``app`` runs a test on both backends: a fresh SQLite file and a
fresh PostgreSQL schema (real server at 127.0.0.1:5432, database ``test``)."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from application import SYSTEM_TENANT_ID, User
from application.app import App
from infrastructure.bootstrap import bootstrap
from tests.support.later import finish, later

PG_DSN = os.environ.get("TIDINGS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def pytest_configure(config: pytest.Config) -> None:
    # The tests start hundreds of Python processes (the CLI, workers, servers), each
    # importing the whole app. Under PYTHONDONTWRITEBYTECODE each would compile the
    # project's modules again (~0.1 s of CPU a process), and pytest would rewrite every
    # test module again each run (~3 s); they share one bytecode cache outside the source
    # tree instead, which keeps the tree as clean as the setting asks.
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        os.environ.setdefault(
            "PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "tidings-tests-pycache")
        )
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
        sys.dont_write_bytecode = False


_FAILED_ON_WORKERS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Under pytest-xdist: a worker's failed background teardowns, for the run's end."""
    _FAILED_ON_WORKERS.extend(getattr(node, "workeroutput", {}).get("teardown_failed", []))


def pytest_sessionfinish(session: pytest.Session) -> None:
    failed = finish() + _FAILED_ON_WORKERS  # the background teardowns (tests/support/later.py)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its controller reports them
        workeroutput["teardown_failed"] = failed
        return
    if failed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in failed:
            if reporter is not None:
                reporter.write_line(f"background teardown failed: {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def drop_schema(schema: str) -> None:
    with psycopg.connect(PG_DSN.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    backend = getattr(request, "param", "sqlite")
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'tidings.db'}"
        return
    schema = "t_" + uuid.uuid4().hex[:12]
    yield f"{PG_DSN}?schema={schema}"
    later(drop_schema, schema)


@pytest.fixture
def make_app(database_url: str, tmp_path: Path) -> Iterator[Callable[..., App]]:
    """Build apps on this test's database (several may share it, like processes do)."""
    apps: list[App] = []

    def make(**settings: Any) -> App:
        settings.setdefault("project_inline", False)
        settings.setdefault("allow_private_hosts", True)  # the test servers are on loopback
        settings.setdefault("blob_dir", tmp_path / "blobs")
        settings.setdefault("database_url", database_url)
        app = bootstrap(**settings)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    return make_app()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test that uses a database runs on both backends.
    if "database_url" in metafunc.fixturenames and not any(
        m.name == "parametrize" and "database_url" in m.args[0]
        for m in metafunc.definition.iter_markers()
    ):
        metafunc.parametrize("database_url", BACKENDS, indirect=True)


@pytest.fixture
def tenant() -> str:
    return "t-" + uuid.uuid4().hex[:8]


@pytest.fixture
def admin(tenant: str) -> User:
    return User(id="admin-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin"}))


@pytest.fixture
def member(tenant: str) -> User:
    return User(id="member-" + tenant, tenant_id=tenant, roles=frozenset({"TenantMember"}))


@pytest.fixture
def operator() -> User:
    return User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
