"""The quarantine from the command line, on both backends: with a poison event in the
store, ``projections run --once`` and ``rebuild`` exit 0, ``status`` counts it, and
``quarantine list`` names it (projection, position, tenant, error)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from domain.custom_field_values import CustomFieldValueSet, entity_stream_id
from infrastructure.bootstrap import bootstrap, event_store
from tests.e2e.process import Cli

ADMIN = {"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]}


def plant_poison(cli: Cli, tmp_path: Path) -> int:
    """A value event the codec cannot read, for tenant ``evil``, appended past the codec
    (as an older encoder or an unchecked import could have); answer its position."""
    app = bootstrap(
        database_url=cli.env["TIDINGS_DATABASE_URL"],
        blob_dir=tmp_path / "blobs",
        master_key=cli.env["TIDINGS_MASTER_KEY"],
        project_inline=False,
    )
    try:
        state = (
            '{"_v":1,"timestamp":"' + datetime.now(UTC).isoformat() + '","tenant_id":"evil",'
            '"entity_name":"contact","entity_id":"e","field_key":"n","definition_id":"d",'
            '"generation":1,"value":1' + "0" * 400 + "}"
        ).encode()
        store = event_store(app)
        stream = entity_stream_id("evil", "contact", "e")
        store.append_stored([(stream, 1, CustomFieldValueSet.TOPIC, state)])
        return store.head()
    finally:
        app.close()


def test_a_poison_event_is_counted_listed_and_survived(cli: Cli, tmp_path: Path) -> None:
    define = {"entityName": "contact", "fieldKey": "n", "field": {"type": "number"}}
    as_admin = json.dumps(ADMIN)
    written = cli(
        "write",
        "define-tenant-field",
        "--as",
        as_admin,
        "--payload",
        json.dumps(define),
        project_inline="false",
    )
    assert written.returncode == 0, written.stderr
    position = plant_poison(cli, tmp_path)
    value = {"entityName": "contact", "entityId": "c1", "fieldKey": "n", "value": 7}
    written = cli(
        "write",
        "set-custom-field",
        "--as",
        as_admin,
        "--payload",
        json.dumps(value),
        project_inline="false",
    )
    assert written.returncode == 0, written.stderr

    ran = cli("projections", "run", "--once")
    assert ran.returncode == 0, ran.stderr
    assert "event=quarantined" in ran.stderr and "tenant=evil" in ran.stderr

    status = cli("projections", "status", "--json")
    assert status.returncode == 0, status.stderr
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert {name: (row["quarantined"], row["lag"]) for name, row in rows.items()} == {
        "custom_fields": (1, 0),
        "mail": (1, 0),
        "feed": (1, 0),
        "mail_outbound": (1, 0),
    }
    assert "quarantined" in cli("projections", "status").stdout

    listed = cli("projections", "quarantine", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [
        (q["projection"], q["position"], q["tenantId"], q["errorClass"])
        for q in json.loads(listed.stdout)
    ] == [
        ("custom_fields", position, "evil", "UnreadableEvent"),
        ("feed", position, "evil", "UnreadableEvent"),
        ("mail", position, "evil", "UnreadableEvent"),
        ("mail_outbound", position, "evil", "UnreadableEvent"),
    ]
    one = cli("projections", "quarantine", "list", "mail", "--json")
    assert [q["projection"] for q in json.loads(one.stdout)] == ["mail"]
    table = cli("projections", "quarantine", "list")
    assert table.returncode == 0 and "UnreadableEvent" in table.stdout
    unknown = cli("projections", "quarantine", "list", "nope")
    assert unknown.returncode == 2 and "unknown projection" in unknown.stderr

    rebuilt = cli("projections", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    after = {
        row["name"]: row["quarantined"]
        for row in json.loads(cli("projections", "status", "--json").stdout)
    }
    assert after == {"custom_fields": 1, "mail": 1, "feed": 1, "mail_outbound": 1}

    read = cli(
        "query",
        "get-entity",
        "--as",
        as_admin,
        "--payload",
        '{"entityName": "contact", "entityId": "c1"}',
    )
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["customFields"] == {"n": 7}
