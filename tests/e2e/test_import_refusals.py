"""``tidings events import`` refuses a bad file as a child process, on both backends:
one line naming the bad line, exit 1, and nothing written to the target store."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
DEFINE = '{"entityName": "contact", "fieldKey": "%s", "field": {"type": "text"}}'


def ok(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 0, process.stderr
    return process.stdout


def test_a_wrongly_typed_event_is_refused_with_its_line_and_nothing_is_written(
    cli: Cli, other_database_url: str, tmp_path: Path
) -> None:
    for key in ("tier", "region"):
        ok(cli("write", "define-tenant-field", "--as", ADMIN, "--payload", DEFINE % key))
    exported = tmp_path / "events.jsonl"
    ok(cli("events", "export", "--output", str(exported)))
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(records) >= 3
    records[-1]["state"]["generation"] = "one"  # an int field given a string
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in records))

    refused = cli("events", "import", str(bad), database_url=other_database_url)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    [line] = [text for text in refused.stderr.splitlines() if text.startswith("error:")]
    assert f"line {len(records)}" in line and "generation" in line

    status = json.loads(ok(cli("projections", "status", "--json", database_url=other_database_url)))
    assert {row["head"] for row in status} == {0}
