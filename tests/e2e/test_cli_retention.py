"""``tidings retention run [--dry-run]`` as an operator runs it, on SQLite and on
PostgreSQL: a log whose value was set long ago (imported, so no clock is moved), the
dry run counting it per tenant and field, the run expiring it once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from domain.custom_field_values import entity_stream_id
from domain.field_definition import catalog_id, definition_id
from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
GET_C1 = json.dumps({"entityName": "contact", "entityId": "c1"})
NOTE = str(definition_id("acme", "contact", "note"))


def ok(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 0, process.stderr
    return process.stdout


def old_log(path: Path) -> Path:
    when = "2024-01-10T09:00:00+00:00"
    ref = {"tenant_id": "acme", "entity_name": "contact", "field_key": "note"}
    rows: list[tuple[str, str, dict[str, Any]]] = [
        (
            NOTE,
            "tidings.fields.FieldDefinitionDefined",
            {
                "_v": 3,
                **ref,
                "scope": "tenant",
                "generation": 1,
                "field": {"type": "text"},
                "field_access": None,
                "required": False,
                "searchable": False,
                "display_order": 0,
                "label": "Note",
                "retention": {"keepFor": "30d", "action": "anonymize"},
            },
        ),
        (str(catalog_id("acme")), "tidings.fields.FieldSlotClaimed", {"_v": 1, **ref}),
        (
            str(entity_stream_id("acme", "contact", "c1")),
            "tidings.fields.CustomFieldValueSet",
            {
                "_v": 2,
                **ref,
                "entity_id": "c1",
                "definition_id": NOTE,
                "generation": 1,
                "sealed": 'plain:"call back"',
                "digest": 'plain:"call back"',
            },
        ),
    ]
    lines = [
        json.dumps(
            {
                "position": n,
                "originatorId": stream,
                "originatorVersion": 1,
                "topic": topic,
                "state": {**state, "timestamp": when},
            }
        )
        for n, (stream, topic, state) in enumerate(rows, 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_retention_run_shows_then_expires(cli: Cli, tmp_path: Path) -> None:
    ok(cli("events", "import", str(old_log(tmp_path / "old.jsonl"))))
    ok(cli("projections", "run", "--once"))

    dry = json.loads(ok(cli("retention", "run", "--dry-run", "--json")))
    assert (dry["dryRun"], dry["found"], dry["recorded"]) == (True, 1, 0)
    assert dry["items"] == [
        {
            "kind": "custom_field_values",
            "tenantId": "acme",
            "subject": "contact.note",
            "action": "anonymize",
            "count": 1,
        }
    ]
    table = ok(cli("retention", "run", "--dry-run"))
    assert "contact.note" in table and "1 would expire (dry run: nothing recorded)" in table
    kept = json.loads(ok(cli("query", "get-entity", "--as", ADMIN, "--payload", GET_C1, "--json")))
    assert kept["customFields"] == {"note": "call back"}

    run = json.loads(ok(cli("retention", "run", "--json")))
    assert (run["found"], run["recorded"]) == (1, 1)
    answer = json.loads(
        ok(cli("query", "get-entity", "--as", ADMIN, "--payload", GET_C1, "--json"))
    )
    assert answer["customFields"] == {"note": "[anonymized]"}
    again = json.loads(ok(cli("retention", "run", "--json")))
    assert (again["found"], again["recorded"], again["items"]) == (0, 0, [])
