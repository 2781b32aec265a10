"""The command line end to end, on SQLite and on PostgreSQL: write, query, errors,
projections, export and import — each step a separate ``tidings`` process."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from infrastructure.sql.database import DatabaseUrl
from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
GET_C1 = json.dumps({"entityName": "contact", "entityId": "c1"})


def copy_keys(source_url: str, target_url: str) -> None:
    """Restore the source store's wrapped keys into the target (same master key)."""
    rows: list[tuple[Any, ...]] = []
    for url, write in ((source_url, False), (target_url, True)):
        parsed = DatabaseUrl.parse(url)
        if parsed.dialect == "sqlite":
            assert parsed.sqlite_path is not None
            with sqlite3.connect(parsed.sqlite_path) as lite:
                if write:
                    insert = "INSERT INTO crypto_keys (key_id, wrapped) VALUES (?, ?)"
                    lite.executemany(insert, rows)
                else:
                    rows = list(lite.execute("SELECT key_id, wrapped FROM crypto_keys"))
            continue
        with psycopg.connect(parsed.conninfo) as pg:
            table = f'"{parsed.schema}".crypto_keys'
            if write:
                with pg.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table} (key_id, wrapped) VALUES (%s, %s)",
                        rows,
                    )
            else:
                rows = list(pg.execute(f"SELECT key_id, wrapped FROM {table}"))


def ok(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 0, process.stderr
    return process.stdout


def test_write_query_projections_export_import(
    cli: Cli, other_database_url: str, tmp_path: Path
) -> None:
    # write: pretty JSON by default (parseable), compact with --json; the user from a file.
    user_file = tmp_path / "ann.json"
    user_file.write_text(ADMIN)
    defined = ok(
        cli(
            "write",
            "define-tenant-field",
            "--as",
            str(user_file),
            "--payload",
            '{"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"},'
            ' "searchable": true}',
        )
    )
    assert json.loads(defined) == {
        "entityName": "contact",
        "fieldKey": "tier",
        "scope": "tenant",
        "generation": 1,
    }
    payload = tmp_path / "set.json"
    payload.write_text(
        json.dumps({"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "gold"})
    )
    out = ok(cli("write", "set-custom-field", "--as", ADMIN, "--payload", f"@{payload}", "--json"))
    assert out.count("\n") == 1
    assert json.loads(out)["value"] == "gold"

    # A failed result: one line on stderr, exit 1; with --json the error object on stdout.
    failed = cli(
        "write",
        "set-custom-field",
        "--as",
        ADMIN,
        "--json",
        "--payload",
        '{"entityName": "contact", "entityId": "c1", "fieldKey": "nope", "value": 1}',
    )
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == ["error: 404 not_found: field contact.nope not found"]
    assert json.loads(failed.stdout)["error"]["code"] == "not_found"

    # On PostgreSQL nothing projects inline: `projections run --once` catches up.
    ran = cli("projections", "run", "--once")
    assert ran.returncode == 0, ran.stderr
    assert "event=stopped" in ran.stderr
    assert all(line.startswith("ts=") for line in ran.stderr.splitlines())
    answer = json.loads(ok(cli("query", "get-entity", "--as", ADMIN, "--payload", GET_C1)))
    assert answer == {"entityName": "contact", "entityId": "c1", "customFields": {"tier": "gold"}}

    status = json.loads(ok(cli("projections", "status", "--json")))
    assert {row["name"] for row in status} >= {"custom_fields"}
    head = status[0]["head"]
    assert all(row["lag"] == 0 and row["position"] == head for row in status)

    rebuilt = json.loads(ok(cli("projections", "rebuild", "custom_fields", "--json")))
    assert rebuilt == [{"name": "custom_fields", "events": head, "seconds": rebuilt[0]["seconds"]}]

    # export -> import into an empty database -> the same answers.
    exported = tmp_path / "events.jsonl"
    ok(cli("events", "export", "--output", str(exported)))
    lines: list[dict[str, Any]] = [json.loads(x) for x in exported.read_text().splitlines()]
    assert [line["position"] for line in lines] == list(range(1, head + 1))
    assert lines[0]["state"]["field"] == {"type": "text"}  # decoded JSON, not base64

    imported = json.loads(
        ok(cli("events", "import", str(exported), "--json", database_url=other_database_url))
    )
    assert imported == {"imported": head, "applied": imported["applied"], "head": head}
    again = json.loads(
        ok(
            cli(
                "query",
                "get-entity",
                "--as",
                ADMIN,
                "--payload",
                GET_C1,
                "--json",
                database_url=other_database_url,
            )
        )
    )
    # Values are sealed under the tenant's key, which lives with the store, not in the log:
    # an imported log reads as erased until the (wrapped) keys are restored beside it.
    assert again["customFields"] == {"tier": "[erased]"}
    copy_keys(cli.env["TIDINGS_DATABASE_URL"], other_database_url)
    again = json.loads(
        ok(
            cli(
                "query",
                "get-entity",
                "--as",
                ADMIN,
                "--payload",
                GET_C1,
                "--json",
                database_url=other_database_url,
            )
        )
    )
    assert again == answer

    refused = cli("events", "import", str(exported), database_url=other_database_url)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith("error: import of")
    assert "not empty" in refused.stderr
