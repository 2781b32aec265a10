"""Start-up refusals of the command line, as a child process on both backends: another
master key (exit 2, one line naming TIDINGS_MASTER_KEY), a malformed one (the setting
and the expected form), and read-only commands where no store exists (one line, no
store and no key file created)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
DEFINE = '{"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}'
GET = '{"entityName": "contact", "entityId": "c1"}'


def one_line_error(process: subprocess.CompletedProcess[str], code: int) -> str:
    assert process.returncode == code, process.stderr
    assert "Traceback" not in process.stderr
    [line] = process.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def test_another_or_a_malformed_master_key_is_refused(cli: Cli) -> None:
    written = cli("write", "define-tenant-field", "--as", ADMIN, "--payload", DEFINE)
    assert written.returncode == 0, written.stderr
    other = base64.b64encode(os.urandom(32)).decode()
    for args in (["projections", "status"], ["query", "get-entity", "--as", ADMIN, "-p", GET]):
        line = one_line_error(cli(*args, master_key=other), 2)
        assert "TIDINGS_MASTER_KEY" in line and other not in line
    line = one_line_error(cli("projections", "status", master_key="abc!"), 2)
    assert "TIDINGS_MASTER_KEY" in line and "base64" in line and "32" in line
    assert "Incorrect padding" not in line
    assert cli("projections", "status").returncode == 0  # its own key still opens it


def test_read_only_commands_create_no_store(
    cli: Cli, other_database_url: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    bare = Cli(workdir, {k: v for k, v in cli.env.items() if k != "TIDINGS_MASTER_KEY"})
    settings = {"database_url": other_database_url, "blob_dir": str(workdir / "blobs")}
    for args in (
        ["projections", "status"],
        ["accounts", "list"],
        ["query", "get-entity", "--as", ADMIN, "-p", GET],
    ):
        line = one_line_error(bare(*args, **settings), 1)
        assert "no tidings store" in line and "TIDINGS_DATABASE_URL" in line
    assert list(workdir.iterdir()) == []
    if other_database_url.startswith("sqlite"):
        assert not Path(other_database_url.removeprefix("sqlite:///")).exists()
    # A write creates the store; then the read-only commands answer.
    assert (
        bare("write", "define-tenant-field", "--as", ADMIN, "-p", DEFINE, **settings).returncode
        == 0
    )
    assert bare("projections", "status", **settings).returncode == 0
