"""A real ``tidings serve`` (uvicorn) child process, one per backend for the module, and
an in-process app on the same database to create keys and catch projections up."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from application import User
from application.app import App
from infrastructure.bootstrap import bootstrap
from tests.conftest import BACKENDS, PG_DSN
from tests.e2e.process import cli_env, command, tidings_vars

START_TIMEOUT = 20.0  # a cold interpreter importing FastAPI on a loaded 2-core machine


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=BACKENDS)
def settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """One database per backend for the module: starting uvicorn costs seconds, so the
    module's tests share one server; each test works in tenants of its own."""
    root = tmp_path_factory.mktemp("http")
    schema = "t_" + uuid.uuid4().hex[:12]
    url = (
        f"sqlite:///{root / 'tidings.db'}"
        if request.param == "sqlite"
        else f"{PG_DSN}?schema={schema}"
    )
    yield {
        "database_url": url,
        "blob_dir": str(root / "blobs"),
        "master_key": base64.b64encode(os.urandom(32)).decode(),
    }
    if request.param == "postgresql":
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="module")
def local_app(settings: dict[str, str]) -> Iterator[App]:
    app = bootstrap(None, **settings)
    yield app
    app.close()


@pytest.fixture(scope="module")
def start_server(
    settings: dict[str, str], tmp_path_factory: pytest.TempPathFactory, local_app: App
) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []
    logs = tmp_path_factory.mktemp("serve")

    def start(**extra: str) -> Server:
        port = _free_port()
        env = cli_env(**settings) | tidings_vars(**extra)
        log_path = logs / f"serve-{port}.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                command("serve", "--port", str(port)),
                cwd=logs,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        server = Server(f"http://127.0.0.1:{port}", process)
        servers.append(server)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(log_path.read_text())
            try:
                if httpx.get(f"{server.url}/healthz", timeout=1.0).status_code == 200:
                    return server
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"tidings serve did not answer within {START_TIMEOUT} s")

    yield start
    for server in servers:
        server.process.terminate()
        try:
            server.process.wait(10)
        except subprocess.TimeoutExpired:
            server.process.kill()


@pytest.fixture(scope="module")
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()


def create_key(app: App, user: User, *roles: str) -> str:
    result = app.write("create-api-key", {"name": "test", "roles": list(roles)}, user)
    assert result.is_success, result.error
    assert result.data is not None
    return str(result.data["key"])


@pytest.fixture(scope="module")
def api_key(local_app: App) -> str:
    tenant = "t-" + uuid.uuid4().hex[:8]
    admin = User(id="fuzz", tenant_id=tenant, roles=frozenset({"TenantAdmin", "TenantMember"}))
    return create_key(local_app, admin, "TenantAdmin", "TenantMember")


@pytest.fixture(scope="module")
def api_schema(server: Server) -> Any:
    import schemathesis  # noqa: PLC0415 - only the fuzz test needs it

    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")
