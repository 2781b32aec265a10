"""Usage and environment errors: one clear line on stderr, no traceback, exit 2 / 1."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e import timing
from tests.e2e.process import cli_env, command

ADMIN = '{"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]}'
GET = '{"entityName": "contact", "entityId": "c1"}'

# (environment, arguments, exit code, the error line's pattern)
CASES = {
    "version": ({}, ["--version"], 0, None),
    "missing --as": ({}, ["query", "get-entity"], 2, r"^error: Missing option '--as'"),
    "--as not JSON": (
        {},
        ["query", "get-entity", "--as", "{nope", "-p", GET],
        2,
        r"^error: Invalid value for '--as': not valid JSON",
    ),
    "--as file missing": (
        {},
        ["query", "get-entity", "--as", "missing.json", "-p", GET],
        2,
        r"^error: Invalid value for '--as': cannot read missing.json",
    ),
    "unknown command": ({}, ["frobnicate"], 2, r"^error: No such command 'frobnicate'"),
    "bad url scheme": (
        {"database_url": "mysql://localhost/x"},
        ["projections", "status"],
        1,
        r"^error: invalid settings: TIDINGS_DATABASE_URL: unsupported",
    ),
    "bad number": (
        {"projection_batch_size": "0"},
        ["projections", "status"],
        1,
        r"^error: invalid settings: TIDINGS_PROJECTION_BATCH_SIZE: ",
    ),
    "postgres unreachable": (
        {"database_url": "postgresql://postgres:s3cret@127.0.0.1:1/test"},
        ["query", "get-entity", "--as", ADMIN, "-p", GET],
        1,
        r"^error: database unavailable \(postgresql 127\.0\.0\.1:1/test schema public\): ",
    ),
}


@pytest.fixture(scope="module")
def finished(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every case at once, as parallel processes (each is mostly interpreter start-up)."""
    processes = {}
    for name, (env, args, _, _) in CASES.items():
        cwd: Path = tmp_path_factory.mktemp("cli")
        processes[name] = subprocess.Popen(
            command(*args),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(
                **{
                    "blob_dir": str(cwd / "blobs"),
                    "database_url": f"sqlite:///{cwd / 'tidings.db'}",
                    **env,
                }
            ),
        )
    done = {}
    for name, process in processes.items():
        stdout, stderr = process.communicate(timeout=timing.PROCESS)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done


@pytest.mark.parametrize("name", list(CASES))
def test_errors_are_one_line(
    name: str, finished: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    _, _, code, pattern = CASES[name]
    process = finished[name]
    assert process.returncode == code, process.stderr
    if pattern is None:
        assert re.fullmatch(r"tidings \S+\n", process.stdout)
        return
    assert "Traceback" not in process.stderr
    assert len(process.stderr.splitlines()) == 1, process.stderr
    assert re.search(pattern, process.stderr), process.stderr
    assert "s3cret" not in process.stderr
